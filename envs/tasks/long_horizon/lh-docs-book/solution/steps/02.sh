while read -r f; do [ -f "docs/$f" ] && echo "$f"; done < docs/ORDER > book/chapters.txt; true
