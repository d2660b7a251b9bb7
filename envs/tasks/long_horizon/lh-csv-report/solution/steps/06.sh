{ echo region,revenue; awk -F, 'NR > 1 { s[$2] += $6 } END { for (r in s) printf "%s,%.2f\n", r, s[r] }' out/clean_rev.csv | sort; } > out/by_region.csv
