#!/usr/bin/env bash
set -euo pipefail
cat > template.txt <<'EOF'
Hello {{NAME}},
your order {{ORDER_ID}} ships to {{CITY}} on {{DATE}}.
Total: {{TOTAL}} ({{UNKNOWN}} stays)
Thanks, {{NAME}}!
EOF
cat > values.env <<'EOF'
NAME=Dr. Jane O'Neil
ORDER_ID=A-17/b
CITY=S\u00e3o Paulo & Rio
DATE=2024-01-02
TOTAL=$12.50 = 10+2.50
EOF
