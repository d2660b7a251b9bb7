#!/usr/bin/env bash
set -euo pipefail
cat > money.py <<'EOF'
def format_price(cents):
    return "$" + str(cents / 100)
EOF
