#!/usr/bin/env bash
set -euo pipefail
printf 'APP_PORT=8080\nAPP_MODE=prod\nAPP_WORKERS=4\nAPP_SECRET=0123456789abcdef01\n' > app.env
