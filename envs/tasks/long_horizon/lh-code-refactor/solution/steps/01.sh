mv billing/utils.py billing/money.py
sed -i 's/from billing.utils import/from billing.money import/' billing/invoice.py
sed -i 's/^from billing import utils$/from billing import money/; s/utils\.calc_total/money.calc_total/' billing/report.py
