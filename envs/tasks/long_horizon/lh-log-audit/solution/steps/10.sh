grep -o 'code=E[0-9]*' audit/app_errors.txt | cut -d= -f2 | LC_ALL=C sort | uniq -c | awk '{print $2, $1}' | LC_ALL=C sort -k2,2nr -k1,1 > audit/error_codes.txt
