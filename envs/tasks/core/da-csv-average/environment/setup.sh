#!/usr/bin/env bash
set -euo pipefail
cat > grades.csv <<'EOF'
student,subject,score
ann,math,91
bob,math,67
cid,math,72.5
ann,art,88
bob,art,59
cid,art,45
dee,math,100
EOF
