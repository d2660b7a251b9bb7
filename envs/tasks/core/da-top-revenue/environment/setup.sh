#!/usr/bin/env bash
set -euo pipefail
cat > sales.csv <<'EOF'
product,price,qty
lamp,20,3
desk,150,1
chair,45,4
lamp,20,5
pen,1.5,40
desk,150,1
mug,8,10
chair,45,1
EOF
