#!/usr/bin/env bash
set -euo pipefail
cat > people.py <<'EOF'
def sort_people(people):
    return sorted(people, key=lambda p: (p["age"], p["name"]))
EOF
