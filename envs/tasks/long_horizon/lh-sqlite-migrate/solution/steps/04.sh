mkdir -p fixes
sed 's/^ALTER TABLE order /ALTER TABLE orders /' migrations/003_add_currency.sql > fixes/003_add_currency.sql
sqlite3 db/app.db < fixes/003_add_currency.sql
sqlite3 db/app.db "INSERT INTO schema_migrations VALUES ('003');"
