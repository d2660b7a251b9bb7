#!/usr/bin/env bash
set -euo pipefail
awk -F, 'NR == 1 || $3 == "failed"' jobs.csv > failed.csv
