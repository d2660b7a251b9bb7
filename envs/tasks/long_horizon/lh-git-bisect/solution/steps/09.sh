git -C repo checkout -q main
git -C repo merge -q --no-ff fix/total -m "Merge fix/total"
