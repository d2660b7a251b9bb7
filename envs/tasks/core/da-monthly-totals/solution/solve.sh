#!/usr/bin/env bash
set -euo pipefail
python3 - <<'EOF'
import csv
from decimal import Decimal, ROUND_HALF_UP
tot = {}
for r in csv.DictReader(open("transactions.csv")):
    d = r["date"]
    month = d[:7] if "-" in d else f"{d[6:10]}-{d[3:5]}"
    amt = Decimal(r["amount"]) * (Decimal("0.9") if r["currency"] == "USD" else 1)
    tot[month] = tot.get(month, Decimal(0)) + amt
with open("monthly.csv", "w") as f:
    f.write("month,total_eur\n")
    for m in sorted(tot):
        f.write(f"{m},{tot[m].quantize(Decimal('0.01'), ROUND_HALF_UP)}\n")
EOF
