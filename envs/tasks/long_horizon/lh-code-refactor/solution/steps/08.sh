python3 - <<'PY'
p = "billing/cli.py"
s = open(p).read()
s = s.replace("from billing.invoice import invoice_total\n", "from billing.invoice import invoice_total\nfrom billing.money import fmt_money\n")
s = s.replace('    print("Total:", invoice_total(lines))', '    print("Total:", fmt_money(invoice_total(lines)))')
open(p, "w").write(s)
PY
