#!/usr/bin/env bash
set -euo pipefail
c() { GIT_AUTHOR_DATE="2024-01-0$1T10:00:00Z" GIT_COMMITTER_DATE="2024-01-0$1T10:00:00Z" git commit -q -m "$2"; }

git init -q -b main repo && cd repo
echo one > a.txt && git add a.txt && c 1 "first"
echo two >> a.txt && git add a.txt && c 2 "second"
