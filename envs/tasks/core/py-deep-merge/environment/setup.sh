#!/usr/bin/env bash
set -euo pipefail
cat > config.py <<'EOF'
def deep_merge(base, override):
    base.update(override)
    return base
EOF
