#!/usr/bin/env bash
# A repository with 16 commits (fixed dates and identities, so the hashes are fixed); one of
# them breaks `total`.
set -euo pipefail
export GIT_AUTHOR_NAME=Dev GIT_AUTHOR_EMAIL=dev@example.com
export GIT_COMMITTER_NAME=Dev GIT_COMMITTER_EMAIL=dev@example.com
n=0
commit() {
  n=$((n + 1))
  export GIT_AUTHOR_DATE="2024-02-$(printf %02d $n)T09:00:00Z" GIT_COMMITTER_DATE="2024-02-$(printf %02d $n)T09:00:00Z"
  git add -A && git commit -qm "$1"
}
mkdir repo && cd repo
git init -q && git symbolic-ref HEAD refs/heads/main
git config user.name Dev && git config user.email dev@example.com
cat > app.py <<'PY'
def total(xs):
    """Sum of xs."""
    result = 0
    for x in xs:
        result += x
    return result
PY
printf '# app\n' > README.md
cat > check.sh <<'SH'
#!/usr/bin/env bash
# Exit 0 when the app works.
cd "$(dirname "$0")" && python3 -B -c 'import app; assert app.total([1, 2, 3]) == 6 and app.total([]) == 0'
SH
chmod +x check.sh
commit "Initial commit"
printf '\n\ndef label(s):\n    return s.upper() + "!"\n' >> app.py; commit "Add label"
mkdir docs && printf 'Usage: import app\n' > docs/usage.md; commit "Add docs"
git tag v1.0
printf '\n\ndef mean(xs):\n    return total(xs) / len(xs)\n' >> app.py; commit "Add mean"
printf '# app\n\nSmall helpers.\n' > README.md; commit "Update README"
printf '1\n2\n3\n' > data.txt; commit "Add data"
printf '\n\ndef max_value(xs):\n    return max(xs)\n' >> app.py; commit "Add max_value"
printf 'Usage: import app; app.total(xs)\n' > docs/usage.md; commit "Tweak docs"
python3 - <<'PY'
s = open("app.py").read()
s = s.replace("    result = 0\n    for x in xs:\n        result += x\n    return result\n", "    result = 0\n    for x in xs[1:]:\n        result += x\n    return result\n")
open("app.py", "w").write(s)
PY
commit "Optimize total"
printf '\n\ndef min_value(xs):\n    return min(xs)\n' >> app.py; commit "Add min_value"
printf '1\n2\n3\n4\n' > data.txt; commit "Update data"
printf '[app]\nname = app\n' > config.ini; commit "Add config"
printf '# Changes\n\n- many\n' > CHANGES.md; commit "Add CHANGES"
printf '\n\ndef median(xs):\n    s = sorted(xs)\n    return s[len(s) // 2]\n' >> app.py; commit "Add median"
printf 'Usage: import app; app.total(xs) sums xs\n' > docs/usage.md; commit "Fix docs typo"
printf '1.0.1\n' > VERSION; commit "Bump version"
