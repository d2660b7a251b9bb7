#!/usr/bin/env bash
set -euo pipefail
mkdir -p db
sqlite3 db/app.db <<'SQL'
CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users(id), amount REAL NOT NULL, created TEXT NOT NULL);
INSERT INTO users VALUES
 (1, 'Ada', 'Ada@Example.com'), (2, 'Bo', 'bo@example.com'), (3, 'Cy', 'CY@EXAMPLE.COM'),
 (4, 'Di', 'di@example.com'), (5, 'Ed', 'Ed@example.COM'), (6, 'Flo', 'flo@example.com'),
 (7, 'Gus', 'Gus@Example.com'), (8, 'Hal', 'hal@example.com'), (9, 'Ivy', 'IVY@example.com'),
 (10, 'Jo', 'jo@example.com'), (11, 'Kit', 'Kit@Example.Com'), (12, 'Lu', 'lu@example.com');
INSERT INTO orders VALUES
 (1, 1, 19.99, '2024-01-02'), (2, 1, 5.00, '2024-01-09'), (3, 2, 42.50, '2024-01-11'),
 (4, 3, -3.00, '2024-01-12'), (5, 3, 12.25, '2024-01-15'), (6, 4, 0.00, '2024-01-20'),
 (7, 5, 7.75, '2024-02-01'), (8, 5, 7.75, '2024-02-02'), (9, 5, 100.00, '2024-02-03'),
 (10, 6, 3.10, '2024-02-10'), (11, 7, 55.00, '2024-02-14'), (12, 8, -10.00, '2024-02-15'),
 (13, 8, 20.00, '2024-02-20'), (14, 9, 9.99, '2024-03-01'), (15, 9, 0.01, '2024-03-02'),
 (16, 11, 31.40, '2024-03-05'), (17, 11, 8.60, '2024-03-06'), (18, 12, 64.00, '2024-03-09'),
 (19, 2, 1.50, '2024-03-10'), (20, 7, 14.00, '2024-03-12');
SQL
