python3 - <<'PY'
import csv, json
inv = json.load(open("work/inventory.json"))
with open("work/inventory.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["sku", "name", "category", "price", "qty"])
    for it in inv["items"]:
        w.writerow([it["sku"], it["name"], it["category"], f"{it['price']:.2f}", it["qty"]])
PY
