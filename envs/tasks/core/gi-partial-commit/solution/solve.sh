#!/usr/bin/env bash
set -euo pipefail
cd repo && git add src/app.py && git commit -q -m 'update app'
