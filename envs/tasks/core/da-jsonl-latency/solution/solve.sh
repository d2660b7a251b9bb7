#!/usr/bin/env bash
set -euo pipefail
python3 - <<'EOF'
import json, statistics
by = {}
for line in open("requests.jsonl"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    by.setdefault(r["endpoint"], []).append(r["ms"])
out = {k: {"count": len(v), "max": max(v), "median": statistics.median(v)} for k, v in by.items()}
json.dump(out, open("stats.json", "w"))
EOF
