sqlite3 db/app.db <<'SQL'
CREATE VIEW user_totals AS
SELECT u.id AS user_id, u.name AS name, COUNT(o.id) AS orders, ROUND(COALESCE(SUM(o.amount), 0.0), 2) AS total
FROM users u LEFT JOIN orders o ON o.user_id = u.id
GROUP BY u.id, u.name;
SQL
