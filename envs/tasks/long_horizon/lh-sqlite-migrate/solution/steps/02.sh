sqlite3 db/app.db < migrations/001_add_status.sql
sqlite3 db/app.db "INSERT INTO schema_migrations VALUES ('001');"
