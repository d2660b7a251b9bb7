#!/usr/bin/env bash
set -euo pipefail
cat > users.csv <<'EOF'
user_id,name
1,alice
2,bob
3,carol
4,dan
EOF
cat > orders.csv <<'EOF'
order_id,user_id,amount
100,1,19.99
101,2,5.00
102,1,0.01
103,3,20.00
104,2,15.00
105,3,0.50
EOF
