#!/usr/bin/env bash
set -euo pipefail
mkdir -p project/src
printf 'print("hi")\n' > project/src/main.py
printf '# Project\n' > project/README.md
printf 'MIT\n' > project/LICENSE
