while read -r f; do grep -n TODO "docs/$f" | sed "s|^|$f:|"; done < book/chapters.txt > book/todo.txt
