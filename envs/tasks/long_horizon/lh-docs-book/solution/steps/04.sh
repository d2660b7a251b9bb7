n=0
while read -r f; do
  n=$((n + 1))
  [ "$n" = 1 ] || echo
  sed "1s/^# /# Chapter $n: /" "docs/$f"
done < book/chapters.txt > book/book.md
