#!/usr/bin/env bash
set -euo pipefail
cat > transactions.csv <<'EOF'
date,amount,currency
2024-01-15,100.00,EUR
03/01/2024,50.00,USD
2024-02-01,10.10,EUR
28/02/2024,0.90,EUR
2023-12-31,5.00,USD
15/03/2024,1000.00,USD
2024-03-31,-20.00,EUR
EOF
