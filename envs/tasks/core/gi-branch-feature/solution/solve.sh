#!/usr/bin/env bash
set -euo pipefail
cd repo
git checkout -q -b feature/login main
echo TODO > login.txt && git add login.txt && git commit -q -m 'add login stub'
git checkout -q main
