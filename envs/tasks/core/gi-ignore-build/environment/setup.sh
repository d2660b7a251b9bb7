#!/usr/bin/env bash
set -euo pipefail
c() { GIT_AUTHOR_DATE="2024-01-0$1T10:00:00Z" GIT_COMMITTER_DATE="2024-01-0$1T10:00:00Z" git commit -q -m "$2"; }

git init -q -b main repo && cd repo
mkdir -p build src
echo "int main" > src/main.c; echo bin > build/app; echo obj > build/main.o; echo t > cache.tmp; echo t > src/x.tmp
git add -A && c 1 "everything"
