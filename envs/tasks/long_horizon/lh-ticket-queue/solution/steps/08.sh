awk '{ printf "%03d: %s\n", NR, $0 }' merged.txt > numbered.txt && ./queue done
