sed -i 's/\bcalc_total\b/compute_total/g' billing/money.py billing/invoice.py billing/report.py
