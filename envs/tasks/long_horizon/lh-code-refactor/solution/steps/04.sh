python3 - <<'PY'
p = "billing/money.py"
s = open(p).read()
s = s.replace("\n\ndef deprecated_round(x):\n    return int(x + 0.5)\n", "\n")
open(p, "w").write(s.rstrip("\n") + "\n")
PY
