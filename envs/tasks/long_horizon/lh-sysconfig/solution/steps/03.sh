awk -F: -v OFS=: '$1 == "legacy" { $7 = "/usr/sbin/nologin" } { print }' etc/passwd > etc/passwd.new && cat etc/passwd.new > etc/passwd && rm etc/passwd.new
