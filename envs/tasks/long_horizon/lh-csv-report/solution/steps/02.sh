{ head -n1 raw/sales_q1.csv; tail -n +2 raw/sales_q1.csv; tail -n +2 raw/sales_q2.csv; } > out/all.csv
