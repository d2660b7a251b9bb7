while read -r f; do grep -o '\*\*[^*]*\*\*' "docs/$f"; done < book/chapters.txt | sed 's/\*\*//g' | sort -f -u > book/glossary.txt
