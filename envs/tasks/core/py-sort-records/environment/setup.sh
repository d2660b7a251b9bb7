#!/usr/bin/env bash
set -euo pipefail
cat > people.py <<'EOF'
def sort_people(people):
    people.sort(key=lambda p: p["name"])
    return people
EOF
