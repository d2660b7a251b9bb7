#!/usr/bin/env bash
set -euo pipefail
cat > worker.sh <<'EOF'
#!/usr/bin/env bash
while true; do date +%s >> worker.out; sleep 0.2; done
EOF
chmod +x worker.sh
