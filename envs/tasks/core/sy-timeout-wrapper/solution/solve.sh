#!/usr/bin/env bash
set -euo pipefail
cat > limit.sh <<'EOF'
#!/usr/bin/env bash
secs=$1; shift
setsid "$@" &
child=$!
( sleep "$secs"; touch "/tmp/.limit-$child"; kill -KILL -- "-$child" 2>/dev/null ) &
watcher=$!
wait "$child"; rc=$?
if [ -e "/tmp/.limit-$child" ]; then rm -f "/tmp/.limit-$child"; exit 124; fi
kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
exit $rc
EOF
chmod +x limit.sh
