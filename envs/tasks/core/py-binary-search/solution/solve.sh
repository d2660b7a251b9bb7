#!/usr/bin/env bash
set -euo pipefail
cat > search.py <<'EOF'
def find(xs, target):
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if xs[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < len(xs) and xs[lo] == target else -1
EOF
