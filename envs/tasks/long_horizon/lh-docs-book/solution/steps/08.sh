n=0; while read -r f; do n=$((n + 1)); echo "Chapter $n: $(wc -w < "docs/$f")"; done < book/chapters.txt > book/words.txt
