awk -F: '$1 != "tmpuser"' etc/passwd > etc/passwd.new && cat etc/passwd.new > etc/passwd && rm etc/passwd.new
awk -F: -v OFS=: '$1 == "tmpuser" { next } { n = split($4, m, ","); out = ""; for (i = 1; i <= n; i++) if (m[i] != "tmpuser") out = out (out == "" ? "" : ",") m[i]; $4 = out; print }' etc/group > etc/group.new && cat etc/group.new > etc/group && rm etc/group.new
