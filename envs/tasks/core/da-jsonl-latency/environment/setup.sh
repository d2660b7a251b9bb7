#!/usr/bin/env bash
set -euo pipefail
cat > requests.jsonl <<'EOF'
{"endpoint": "/a", "ms": 10}
{"endpoint": "/b", "ms": 200}
{"endpoint": "/a", "ms": 30}
not json at all
{"endpoint": "/a", "ms": 20}
{"endpoint": "/b", "ms": 100}
{"endpoint": "/c", "ms": 7}
{"endpoint": "/a", "ms": 1000}
EOF
