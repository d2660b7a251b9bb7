{ echo month,revenue; awk -F, 'NR > 1 { s[substr($1, 1, 7)] += $6 } END { for (m in s) printf "%s,%.2f\n", m, s[m] }' out/clean_rev.csv | sort; } > out/by_month.csv
