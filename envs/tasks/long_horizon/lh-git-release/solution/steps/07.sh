git -C repo tag -a v1.1.0 -m "Release 1.1.0"
