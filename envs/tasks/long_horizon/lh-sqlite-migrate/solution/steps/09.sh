mkdir -p exports
sqlite3 -csv -header db/app.db 'SELECT * FROM user_totals ORDER BY user_id' > exports/user_totals.csv
