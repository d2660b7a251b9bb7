while read -r f; do cat "inbox/$f"; done < inbox/index.txt > merged.txt && ./queue done
