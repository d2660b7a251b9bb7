mkdir -p audit
awk -F: '$3 >= 1000 { print $1 ":" $3 ":" $7 }' etc/passwd | sort -t: -k2,2n > audit/users.txt
