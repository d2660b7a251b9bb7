#!/usr/bin/env bash
set -euo pipefail
mkdir -p logs && echo "gen0" > logs/app.log
