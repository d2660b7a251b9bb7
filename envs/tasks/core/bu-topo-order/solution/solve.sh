#!/usr/bin/env bash
set -euo pipefail
cat > order.sh <<'EOF'
#!/usr/bin/env bash
exec python3 - "$1" <<'PY'
import heapq, sys
deps = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    t, _, rest = line.partition(":")
    deps.setdefault(t.strip(), set()).update(rest.split())
    for d in rest.split():
        deps.setdefault(d, set())
indeg = {t: len(d) for t, d in deps.items()}
users = {t: [] for t in deps}
for t, ds in deps.items():
    for d in ds:
        users[d].append(t)
ready = [t for t, n in indeg.items() if n == 0]
heapq.heapify(ready)
out = []
while ready:
    t = heapq.heappop(ready)
    out.append(t)
    for u in users[t]:
        indeg[u] -= 1
        if indeg[u] == 0:
            heapq.heappush(ready, u)
if len(out) != len(deps):
    print("cycle", file=sys.stderr)
    sys.exit(2)
print("\n".join(out))
PY
EOF
chmod +x order.sh
