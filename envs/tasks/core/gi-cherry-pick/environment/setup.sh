#!/usr/bin/env bash
set -euo pipefail
c() { GIT_AUTHOR_DATE="2024-01-0$1T10:00:00Z" GIT_COMMITTER_DATE="2024-01-0$1T10:00:00Z" git commit -q -m "$2"; }

git init -q -b main repo && cd repo
printf 'def get(d, k):\n    return d[k]\n' > util.py && git add -A && c 1 "init"
git checkout -q -b hotfix
echo "EXPERIMENT = True" > experiment.py && git add -A && c 2 "wip: experiment"
printf 'def get(d, k):\n    if d is None:\n        return None\n    return d[k]\n' > util.py && git add -A && c 3 "fix: null check"
git checkout -q main
