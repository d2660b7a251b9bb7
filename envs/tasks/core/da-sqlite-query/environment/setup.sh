#!/usr/bin/env bash
set -euo pipefail
sqlite3 shop.db <<'EOF'
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL);
INSERT INTO customers VALUES (1,'Mia','Berlin'),(2,'Ole','Berlin'),(3,'Ida','Hamburg'),(4,'Ben','Berlin'),(5,'Eva','Berlin');
INSERT INTO orders(customer_id,total) VALUES (1,10),(1,12),(1,9),(2,5),(2,7),(3,1),(3,2),(3,3),(3,4),(4,1),(4,1),(4,1),(4,1),(5,3),(5,3);
EOF
