awk '
  /^[[:space:]]*(;|$)/ { next }
  /^\[/ { n += 10; name = tolower(substr($0, 2, length($0) - 2)); out = sprintf("conf.d/%d-%s.ini", n, name) }
  { print > out }
' config/app.ini
