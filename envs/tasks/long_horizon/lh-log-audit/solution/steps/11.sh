total=$(awk '$1 == "total" {print $2}' audit/requests.txt)
errors=$(wc -l < audit/errors_5xx.log)
ips=$(( $(wc -l < audit/bytes_per_ip.csv) - 1 ))
top=$(head -n1 audit/top_ips.txt | awk '{print $2}')
jq -n --argjson t "$total" --argjson e "$errors" --argjson u "$ips" --arg top "$top" \
  '{requests: $t, error_rate: ((($e / $t) * 10000 | round) / 10000), unique_ips: $u, top_ip: $top}' > audit/summary.json
