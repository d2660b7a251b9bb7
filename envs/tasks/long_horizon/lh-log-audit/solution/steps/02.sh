{ for f in web-1.log web-2.log; do echo "$f $(wc -l < logs/$f)"; done; echo "total $(cat logs/web-*.log | wc -l)"; } > audit/requests.txt
