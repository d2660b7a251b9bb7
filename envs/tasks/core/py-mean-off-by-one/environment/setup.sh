#!/usr/bin/env bash
set -euo pipefail
cat > stats.py <<'EOF'
def mean(xs):
    """Arithmetic mean of a non-empty list."""
    total = 0
    for x in xs:
        total += x
    return total / (len(xs) - 1)
EOF
