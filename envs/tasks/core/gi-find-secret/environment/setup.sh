#!/usr/bin/env bash
set -euo pipefail
c() { GIT_AUTHOR_DATE="2024-01-0$1T10:00:00Z" GIT_COMMITTER_DATE="2024-01-0$1T10:00:00Z" git commit -q -m "$2"; }

git init -q -b main repo && cd repo
echo "app" > app.cfg && git add -A && c 1 "init"
echo "debug=false" >> app.cfg && git add -A && c 2 "disable debug"
echo "SECRET_TOKEN=abc123" >> app.cfg && echo "x" > x.txt && git add -A && c 3 "tune config"
echo "y" > y.txt && git add -A && c 4 "add y"
sed -i '/SECRET_TOKEN/d' app.cfg && git add -A && c 5 "cleanup"
echo "note: SECRET_TOKEN must never be committed" > NOTES && git add -A && c 6 "add notes"
