#!/usr/bin/env bash
set -euo pipefail
python3 - <<'EOF'
import csv, json
rows = json.load(open("records.json"))
with open("records.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["id", "name", "email", "city"])
    for r in rows:
        w.writerow([r.get(k, "") for k in ("id", "name", "email", "city")])
EOF
