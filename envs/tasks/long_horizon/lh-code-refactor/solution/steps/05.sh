python3 - <<'PY'
p = "billing/money.py"
s = open(p).read()
open(p, "w").write("VAT_RATE = 0.19\n\n\n" + s)
p = "billing/invoice.py"
s = open(p).read().replace("from billing.money import compute_total, fmt_money", "from billing.money import VAT_RATE, compute_total, fmt_money").replace("(1 + 0.19)", "(1 + VAT_RATE)")
open(p, "w").write(s)
p = "billing/report.py"
s = open(p).read().replace("net * 0.19", "net * money.VAT_RATE")
open(p, "w").write(s)
PY
