git -C repo checkout -q main
git -C repo merge -q --no-ff release/1.1 -m "Merge release/1.1"
