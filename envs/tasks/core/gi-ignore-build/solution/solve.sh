#!/usr/bin/env bash
set -euo pipefail
cd repo
printf 'build/\n*.tmp\n' > .gitignore
git rm -r -q --cached build cache.tmp src/x.tmp
git add .gitignore && git commit -q -m 'ignore build artifacts'
