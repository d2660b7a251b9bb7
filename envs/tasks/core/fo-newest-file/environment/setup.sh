#!/usr/bin/env bash
set -euo pipefail
mkdir -p reports
touch -d '2023-05-01 10:00' reports/may.csv
touch -d '2023-07-15 09:00' reports/july.csv
touch -d '2022-12-31 23:59' reports/dec.csv
touch -d '2023-07-15 08:59' reports/july_draft.csv
touch -d '2023-01-02 00:00' reports/jan.csv
