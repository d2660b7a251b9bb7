sed -i 's/\t/    /g' merged.txt && ./queue done
