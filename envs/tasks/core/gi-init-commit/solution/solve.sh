#!/usr/bin/env bash
set -euo pipefail
cd project && git init -q -b main && git add -A && git commit -q -m 'initial import'
