#!/usr/bin/env bash
set -euo pipefail
awk -F, 'NR > 1 { s += $3; n++ } END { printf "%.2f\n", s / n }' grades.csv > average.txt
