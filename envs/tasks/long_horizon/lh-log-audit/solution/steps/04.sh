cat logs/web-1.log logs/web-2.log | awk '{print $1}' | LC_ALL=C sort | uniq -c | awk '{print $1, $2}' | LC_ALL=C sort -k1,1nr -k2,2 | head -n 5 > audit/top_ips.txt
