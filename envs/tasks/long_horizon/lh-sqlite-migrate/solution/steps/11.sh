for t in $(sqlite3 db/app.db "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"); do
  echo "$t $(sqlite3 db/app.db "SELECT COUNT(*) FROM $t")"
done > exports/counts.txt
