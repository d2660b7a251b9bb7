#!/usr/bin/env bash
set -euo pipefail
cat > svc.sh <<'EOF'
#!/usr/bin/env bash
cd "$(dirname "$0")"
alive() { [ -f worker.pid ] && kill -0 "$(cat worker.pid)" 2>/dev/null; }
case "$1" in
  start)
    if alive; then echo "already running"; exit 0; fi
    nohup ./worker.sh >/dev/null 2>&1 &
    echo $! > worker.pid
    echo started ;;
  status)
    if alive; then echo running; else echo stopped; exit 3; fi ;;
  stop)
    if alive; then kill "$(cat worker.pid)"; while kill -0 "$(cat worker.pid)" 2>/dev/null; do sleep 0.05; done; fi
    rm -f worker.pid
    echo stopped ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
EOF
chmod +x svc.sh
