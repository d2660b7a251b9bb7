cat > fixes/006_reject_orders.sql <<'SQL'
BEGIN;
CREATE TABLE orders_rejected AS SELECT * FROM orders WHERE 0;
INSERT INTO orders_rejected SELECT * FROM orders WHERE amount <= 0;
DELETE FROM orders WHERE amount <= 0;
COMMIT;
SQL
sqlite3 db/app.db < fixes/006_reject_orders.sql
sqlite3 db/app.db "INSERT INTO schema_migrations VALUES ('006');"
