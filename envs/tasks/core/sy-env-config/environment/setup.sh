#!/usr/bin/env bash
set -euo pipefail
cat > app.sh <<'EOF'
#!/usr/bin/env bash
fail() { echo "FAIL: $1"; exit 1; }
[ "${APP_PORT:-}" -ge 1024 ] 2>/dev/null && [ "$APP_PORT" -le 65535 ] || fail "APP_PORT must be 1024-65535"
case "${APP_MODE:-}" in prod|staging) ;; *) fail "APP_MODE must be prod or staging";; esac
[ "${APP_WORKERS:-0}" -eq $(( ${APP_WORKERS:-0} )) ] 2>/dev/null && [ "${APP_WORKERS:-0}" -gt 0 ] || fail "APP_WORKERS must be a positive integer"
[ -n "${APP_SECRET:-}" ] && [ ${#APP_SECRET} -ge 16 ] || fail "APP_SECRET must have 16+ characters"
echo OK
EOF
chmod +x app.sh
