umask 077
: > secrets.env.tmp
for f in conf.d/*.ini; do
  sec=$(head -n1 "$f" | tr -d '[]' | tr '[:lower:]' '[:upper:]')
  awk -v sec="$sec" -v sfile=secrets.env.tmp '
    /^(password|token) = / { k = toupper(substr($0, 1, index($0, " ") - 1)); v = substr($0, index($0, "= ") + 2); print sec "_" k "=" v >> sfile; print tolower(k) " = ${" sec "_" k "}"; next }
    { print }' "$f" > "$f.tmp"
  umask 022; mv "$f.tmp" "$f"; chmod 644 "$f"; umask 077
done
LC_ALL=C sort secrets.env.tmp > secrets.env
rm secrets.env.tmp
chmod 600 secrets.env
