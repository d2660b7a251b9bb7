awk '!seen[$0]++' merged.txt > merged.tmp && mv merged.tmp merged.txt && ./queue done
