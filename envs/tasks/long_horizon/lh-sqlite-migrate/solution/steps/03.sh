sqlite3 db/app.db < migrations/002_orders_index.sql
sqlite3 db/app.db "INSERT INTO schema_migrations VALUES ('002');"
