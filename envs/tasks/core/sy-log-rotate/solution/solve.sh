#!/usr/bin/env bash
set -euo pipefail
cat > rotate.sh <<'EOF'
#!/usr/bin/env bash
cd "$(dirname "$0")/logs"
rm -f app.log.3
for i in 2 1; do [ -f "app.log.$i" ] && mv "app.log.$i" "app.log.$((i + 1))"; done
[ -f app.log ] && mv app.log app.log.1
: > app.log
EOF
chmod +x rotate.sh
