sqlite3 db/app.db .schema > exports/schema.sql
