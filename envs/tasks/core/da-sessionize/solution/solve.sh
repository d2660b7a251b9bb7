#!/usr/bin/env bash
set -euo pipefail
python3 - <<'EOF'
import datetime, json
by = {}
for line in open("clicks.jsonl"):
    e = json.loads(line)
    by.setdefault(e["user"], []).append(datetime.datetime.fromisoformat(e["ts"]))
out = {}
for user, ts in by.items():
    ts.sort()
    sessions, start, longest = 1, ts[0], 0
    for prev, cur in zip(ts, ts[1:]):
        if (cur - prev).total_seconds() > 1800:
            longest = max(longest, int((prev - start).total_seconds()))
            sessions, start = sessions + 1, cur
    longest = max(longest, int((ts[-1] - start).total_seconds()))
    out[user] = {"sessions": sessions, "longest_s": longest, "events": len(ts)}
json.dump(out, open("sessions.json", "w"), indent=1)
EOF
