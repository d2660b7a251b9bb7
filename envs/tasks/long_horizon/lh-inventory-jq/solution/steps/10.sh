python3 - <<'PY'
import json
items = json.load(open("work/inventory.json"))["items"]
total = sum(it["price"] * it["qty"] for it in items)
cats = sorted({it["category"] for it in items})
open("work/report.txt", "w").write(f"items: {len(items)}\ntotal_value: {total:.2f}\ncategories: {','.join(cats)}\n")
PY
