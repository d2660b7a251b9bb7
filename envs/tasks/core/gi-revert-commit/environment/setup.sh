#!/usr/bin/env bash
set -euo pipefail
c() { GIT_AUTHOR_DATE="2024-01-0$1T10:00:00Z" GIT_COMMITTER_DATE="2024-01-0$1T10:00:00Z" git commit -q -m "$2"; }

git init -q -b main repo && cd repo
printf '[server]\ntimeout = 30\nretries = 3\n' > config.ini && git add -A && c 1 "init config"
printf '[server]\ntimeout = 0\n' > config.ini && git add -A && c 2 "break config"
echo "docs" > docs.md && git add -A && c 3 "add docs"
