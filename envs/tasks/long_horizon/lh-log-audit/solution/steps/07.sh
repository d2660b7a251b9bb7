{ echo ip,bytes; cat logs/web-1.log logs/web-2.log | awk '{ b = ($10 == "-") ? 0 : $10; s[$1] += b } END { for (ip in s) print ip "," s[ip] }' | LC_ALL=C sort; } > audit/bytes_per_ip.csv
