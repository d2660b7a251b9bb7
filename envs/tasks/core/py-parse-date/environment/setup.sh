#!/usr/bin/env bash
set -euo pipefail
cat > dates.py <<'EOF'
def parse_date(text):
    y, m, d = text.split("-")
    return int(y), int(d), int(m)
EOF
