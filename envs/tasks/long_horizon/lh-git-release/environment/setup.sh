#!/usr/bin/env bash
# A small repository with a fixed history (fixed dates and identities, so the hashes are fixed).
set -euo pipefail
export GIT_AUTHOR_NAME=Dev GIT_AUTHOR_EMAIL=dev@example.com
export GIT_COMMITTER_NAME=Dev GIT_COMMITTER_EMAIL=dev@example.com
at() { export GIT_AUTHOR_DATE="$1" GIT_COMMITTER_DATE="$1"; }
mkdir repo && cd repo
git init -q
git symbolic-ref HEAD refs/heads/main
git config user.name Dev && git config user.email dev@example.com
printf 'MIT License\n\nCopyright (c) 2024 Example\n\nPermission is hereby granted, free of charge.\n' > LICENSE
printf '# calc\n\nA tiny calculator library.\n' > README.md
printf '1.0.0\n' > VERSION
printf '# Changelog\n\n## 1.0.0\n- Initial commit\n' > CHANGELOG.md
cat > calc.py <<'PY'
def add(a, b):
    return a + b


def subtract(a, b):
    return a - b
PY
git add -A && at 2024-01-01T10:00:00Z && git commit -qm "Initial commit"
git tag -a v1.0.0 -m "Release 1.0.0"
git checkout -q -b feature/old
mkdir docs && printf 'Old notes.\n' > docs/old.md
git add -A && at 2024-01-02T10:00:00Z && git commit -qm "Add old notes"
git checkout -q main
at 2024-01-03T10:00:00Z && git merge -q --no-ff feature/old -m "Merge feature/old"
cat >> calc.py <<'PY'


def multiply(a, b):
    return a * b
PY
git add -A && at 2024-01-04T10:00:00Z && git commit -qm "Add multiply"
cat >> calc.py <<'PY'


def divide(a, b):
    return a // b
PY
git add -A && at 2024-01-05T10:00:00Z && git commit -qm "Add divide"
sed -i 's/    return a - b/    return a + b/' calc.py
git add -A && at 2024-01-06T10:00:00Z && git commit -qm "Refactor subtract"
