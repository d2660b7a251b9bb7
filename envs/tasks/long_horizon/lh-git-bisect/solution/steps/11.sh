bad=$(cat notes/first_bad.txt)
{
  echo "first bad: $(git -C repo log -1 --format='%h %s' --abbrev=7 "$bad")"
  echo "reverted by: $(git -C repo rev-parse --short=7 fix/total)"
} > notes/report.md
