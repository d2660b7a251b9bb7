#!/usr/bin/env bash
set -euo pipefail
for d in data/*/; do n=$(find "$d" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}'); echo "$n $(basename "$d")"; done | sort -k1,1nr | head -n 3 > top_dirs.txt
