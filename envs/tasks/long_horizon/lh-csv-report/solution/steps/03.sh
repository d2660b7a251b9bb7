awk -F, 'NR > 1 && !(NF == 5 && $4 ~ /^[0-9]+$/ && $5 ~ /^[0-9]+(\.[0-9]+)?$/)' out/all.csv > out/rejected.csv
