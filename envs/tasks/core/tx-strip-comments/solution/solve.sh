#!/usr/bin/env bash
set -euo pipefail
grep -vE '^[[:space:]]*(#|$)' app.conf > clean.conf
