#!/usr/bin/env bash
set -euo pipefail
echo '30 2 * * 0 /opt/backup/run.sh --full >> /var/log/backup.log 2>&1' > backup.cron
