#!/usr/bin/env bash
set -euo pipefail
sqlite3 shop.db "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.city = 'Berlin' GROUP BY c.id HAVING COUNT(*) > 2 ORDER BY c.name;" > answer.txt
