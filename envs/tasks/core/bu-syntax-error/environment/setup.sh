#!/usr/bin/env bash
set -euo pipefail
cat > report.py <<'EOF'
import csv
import sys


def main(path):
    totals = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            totals[row["region"]] = totals.get(row["region"], 0) + int(row["amount"]
    for region in sorted(totals):
        print(f"{region}: {totals[region]}")


if __name__ == "__main__":
    main(sys.argv[1])
EOF
printf 'region,amount\nnorth,10\nsouth,5\nnorth,7\neast,1\n' > sales.csv
