#!/usr/bin/env bash
set -euo pipefail
awk '{print $1}' access.log | sort | uniq -c | awk '{print $2, $1}' | LC_ALL=C sort -k2,2nr -k1,1 > ips.txt
