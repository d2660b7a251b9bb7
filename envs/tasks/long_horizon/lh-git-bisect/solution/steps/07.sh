git -C repo revert --no-edit "$(cat notes/first_bad.txt)" >/dev/null
