cat logs/web-1.log logs/web-2.log | awk '{ print substr($4, 14, 2) }' | sort | uniq -c | awk '{print $2, $1}' > audit/hourly.txt
