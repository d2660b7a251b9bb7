python3 - <<'PY'
import json
inv = json.load(open("work/inventory.json"))
out = {}
for it in inv["items"]:
    out[it["category"]] = out.get(it["category"], 0) + it["price"] * it["qty"]
json.dump({k: round(v, 2) for k, v in sorted(out.items())}, open("work/by_category.json", "w"), indent=2)
PY
