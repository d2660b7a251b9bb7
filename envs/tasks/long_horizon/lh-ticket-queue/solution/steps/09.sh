printf "lines: %s\nwords: %s\nchars: %s\n" "$(wc -l < merged.txt)" "$(wc -w < merged.txt)" "$(wc -c < merged.txt)" > stats.txt && ./queue done
