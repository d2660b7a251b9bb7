awk '/^# Chapter / { split($3, a, ":"); ch = a[1]; sec = 0 } /^## / { sec++; sub(/^## /, "## " ch "." sec " ") } { print }' book/book.md > book/book.tmp && mv book/book.tmp book/book.md
