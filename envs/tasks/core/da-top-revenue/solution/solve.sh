#!/usr/bin/env bash
set -euo pipefail
awk -F, 'NR > 1 { r[$1] += $2 * $3 } END { for (p in r) print r[p], p }' sales.csv | sort -k1,1nr | head -n 3 | awk '{print $2}' > top3.txt
