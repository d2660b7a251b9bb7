#!/usr/bin/env bash
set -euo pipefail
python3 - <<'EOF'
import csv
from decimal import Decimal
users = {r["user_id"]: r["name"] for r in csv.DictReader(open("users.csv"))}
agg = {u: [0, Decimal("0")] for u in users}
for r in csv.DictReader(open("orders.csv")):
    agg[r["user_id"]][0] += 1
    agg[r["user_id"]][1] += Decimal(r["amount"])
rows = sorted(((users[u], n, t) for u, (n, t) in agg.items()), key=lambda x: (-x[2], x[0]))
with open("report.csv", "w") as f:
    f.write("name,orders,total\n")
    for name, n, t in rows:
        f.write(f"{name},{n},{t:.2f}\n")
EOF
