cat logs/web-1.log logs/web-2.log | awk '{print $9}' | sort -n | uniq -c | awk '{print $2, $1}' > audit/status_counts.txt
