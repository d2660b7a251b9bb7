cd repo
{
  echo "# Changelog"
  echo
  echo "## 1.1.0"
  git log --reverse --no-merges --format='- %s' v1.0.0..
  echo
  tail -n +3 CHANGELOG.md
} > CHANGELOG.new
mv CHANGELOG.new CHANGELOG.md
git commit -qam "Update changelog"
