cat logs/web-1.log logs/web-2.log | awk '$9 ~ /^5[0-9][0-9]$/' | awk '{ t = substr($4, 14, 8); print t "\t" $0 }' | LC_ALL=C sort -s -k1,1 | cut -f2- > audit/errors_5xx.log
