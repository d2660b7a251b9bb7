#!/usr/bin/env bash
set -euo pipefail
c() { GIT_AUTHOR_DATE="2024-01-0$1T10:00:00Z" GIT_COMMITTER_DATE="2024-01-0$1T10:00:00Z" git commit -q -m "$2"; }

git init -q -b main repo && cd repo
echo "# Demo" > README.md && git add -A && c 1 "init"
echo "A tool for things." >> README.md && git add -A && c 2 "Fix tpyo in README"
