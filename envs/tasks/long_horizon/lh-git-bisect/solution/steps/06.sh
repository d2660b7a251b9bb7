git -C repo checkout -q -b fix/total main
