awk -F, -v OFS=, 'NR == 1 { print $0, "revenue"; next } { printf "%s,%.2f\n", $0, $4 * $5 }' out/clean.csv > out/clean_rev.csv
