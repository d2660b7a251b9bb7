#!/usr/bin/env bash
set -euo pipefail
cat > deps.txt <<'EOF'
# app build graph
app: lib utils config
lib: utils core
utils: core

tests: app fixtures
docs:
config: core
EOF
