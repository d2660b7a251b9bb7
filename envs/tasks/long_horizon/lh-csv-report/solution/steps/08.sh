awk -F, 'NR > 1 { u[$3] += $4 } END { for (p in u) print p, u[p] }' out/clean.csv | sort -k2,2nr -k1,1 > out/top_products.txt
