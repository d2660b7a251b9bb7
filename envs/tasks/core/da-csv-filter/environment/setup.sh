#!/usr/bin/env bash
set -euo pipefail
cat > jobs.csv <<'EOF'
id,name,status,duration_s
1,build-api,ok,120
2,build-web,failed,30
3,test-api,ok,300
4,lint,failed,5
5,deploy-failed-check,ok,12
6,test-web,failed,410
EOF
