ls inbox | grep -vx index.txt | LC_ALL=C sort > inbox/index.txt.tmp && mv inbox/index.txt.tmp inbox/index.txt && ./queue done
