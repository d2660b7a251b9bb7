#!/usr/bin/env bash
set -euo pipefail
cat > events.json <<'EOF'
[{"type": "click", "id": 1}, {"type": "view", "id": 2}, {"type": "click", "id": 3},
 {"type": "purchase", "id": 4, "amount": 10}, {"type": "view", "id": 5}, {"type": "click", "id": 6},
 {"type": "signup", "id": 7}]
EOF
