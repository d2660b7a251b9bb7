#!/usr/bin/env bash
set -euo pipefail
cat > records.json <<'EOF'
[
  {"id": 1, "name": "Ann", "email": "ann@x.io", "city": "Oslo"},
  {"id": 2, "name": "Smith, Bob", "city": "Rome", "extra": true},
  {"id": 3, "name": "Cy \"The Guy\"", "email": "cy@y.io"},
  {"id": 4, "email": "d@z.io", "city": "Lima", "name": "Dee"}
]
EOF
