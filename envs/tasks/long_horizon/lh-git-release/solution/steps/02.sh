git -C repo checkout -q -b release/1.1 main
