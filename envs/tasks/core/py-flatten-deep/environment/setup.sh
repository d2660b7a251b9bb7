#!/usr/bin/env bash
set -euo pipefail
cat > nest.py <<'EOF'
def flatten(value):
    out = []
    for v in value:
        if isinstance(v, list):
            out.extend(v)
        else:
            out.append(v)
    return out
EOF
