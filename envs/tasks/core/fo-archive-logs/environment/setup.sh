#!/usr/bin/env bash
set -euo pipefail
mkdir -p logs/app logs/db
echo app > logs/app/app.log; echo db > logs/db/db.log; echo sys > logs/sys.log
echo keep > logs/README; echo tmp > logs/app/cache.tmp
