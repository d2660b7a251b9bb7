# The dry run fails (the patch expects `1.2`, the code says `1.20`): make the change by hand.
if patch -p1 --dry-run < patches/0004-vat-rate.patch >/dev/null; then exit 1; fi
python3 - <<'PY'
p = "src/shop.py"
s = open(p).read()
s = s.replace('PRICES = {', 'VAT_RATE = 0.2\nPRICES = {', 1).replace("    return amount * 1.20\n", "    return amount * (1 + VAT_RATE)\n")
open(p, "w").write(s)
PY
echo "0004-vat-rate.patch manual" >> applied.txt
