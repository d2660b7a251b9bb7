#!/usr/bin/env bash
set -euo pipefail
c() { GIT_AUTHOR_DATE="2024-01-0$1T10:00:00Z" GIT_COMMITTER_DATE="2024-01-0$1T10:00:00Z" git commit -q -m "$2"; }

git init -q -b main repo && cd repo
printf '[app]\nname = demo\ntimeout = 30\n' > settings.ini && git add -A && c 1 "base"
git checkout -q -b feature
printf '[app]\nname = demo\ntimeout = 30\nlog_level = debug\n' > settings.ini && git add -A && c 2 "log level"
git checkout -q main
printf '[app]\nname = demo\ntimeout = 60\ncache = on\n' > settings.ini && git add -A && c 3 "tune main"
