#!/usr/bin/env bash
set -euo pipefail
cat > temps.csv <<'EOF'
city,day,temp
oslo,1,3.5
oslo,2,
oslo,3,4
rome,1,15
rome,2,17.25
rome,3,
rome,4,
lima,1,20
EOF
