#!/usr/bin/env bash
set -euo pipefail
cat > cart.py <<'EOF'
def add_item(item, cart=[]):
    cart.append(item)
    return cart
EOF
