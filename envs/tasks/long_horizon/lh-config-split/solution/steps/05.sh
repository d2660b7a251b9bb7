ls conf.d | grep '\.ini$' | LC_ALL=C sort > conf.d/index.txt
