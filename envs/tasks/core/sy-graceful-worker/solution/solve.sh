#!/usr/bin/env bash
set -euo pipefail
cat > worker.sh <<'EOF'
#!/usr/bin/env bash
cd "$(dirname "$0")"
echo started >> worker.log
trap 'echo stopping >> worker.log; exit 0' TERM
trap 'echo reloaded >> worker.log' HUP
while true; do
  echo tick >> worker.log
  sleep 0.2 & wait $!
done
EOF
chmod +x worker.sh
