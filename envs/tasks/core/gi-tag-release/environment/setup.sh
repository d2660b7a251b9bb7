#!/usr/bin/env bash
set -euo pipefail
c() { GIT_AUTHOR_DATE="2024-01-0$1T10:00:00Z" GIT_COMMITTER_DATE="2024-01-0$1T10:00:00Z" git commit -q -m "$2"; }

git init -q -b main repo && cd repo
echo 1 > v && git add -A && c 1 "release 1.1"
echo 2 > v && git add -A && c 2 "release 1.2"
echo 3 > v && git add -A && c 3 "start 1.3"
