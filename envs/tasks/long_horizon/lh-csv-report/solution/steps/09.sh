rm -f out/sales.db
sqlite3 out/sales.db 'CREATE TABLE sales (date TEXT, region TEXT, product TEXT, units INTEGER, unit_price REAL, revenue REAL);'
tail -n +2 out/clean_rev.csv > /tmp/clean_rev_rows.csv
sqlite3 out/sales.db <<'SQL'
.mode csv
.import /tmp/clean_rev_rows.csv sales
SQL
rm -f /tmp/clean_rev_rows.csv
