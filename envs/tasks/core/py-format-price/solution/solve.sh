#!/usr/bin/env bash
set -euo pipefail
cat > money.py <<'EOF'
def format_price(cents):
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}${cents // 100:,}.{cents % 100:02d}"
EOF
