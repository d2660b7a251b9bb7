#!/usr/bin/env bash
set -euo pipefail
c() { GIT_AUTHOR_DATE="2024-01-0$1T10:00:00Z" GIT_COMMITTER_DATE="2024-01-0$1T10:00:00Z" git commit -q -m "$2"; }

git init -q -b main repo && cd repo
mkdir src && printf 'def main():\n    return 1\n' > src/app.py && echo "notes v1" > notes.txt
git add -A && c 1 "init"
printf 'def main():\n    return 2\n' > src/app.py && echo "notes v2 (draft)" > notes.txt
