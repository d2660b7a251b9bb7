sqlite3 db/app.db < migrations/004_payments.sql
sqlite3 db/app.db "INSERT INTO schema_migrations VALUES ('004');"
