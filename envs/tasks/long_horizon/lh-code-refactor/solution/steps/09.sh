python3 - <<'PY'
p = "billing/money.py"
s = open(p).read()
s = s.replace("def compute_total(amounts):\n", 'def compute_total(amounts):\n    """Sum of `amounts`."""\n')
s = s.replace("def fmt_money(x):\n", 'def fmt_money(x):\n    """`x` with two decimals and thousands separators."""\n')
open(p, "w").write(s)
PY
