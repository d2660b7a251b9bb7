python3 - <<'PY'
import json
old = {it["sku"]: it for it in json.load(open("inventory.json"))["items"]}
new = {it["sku"]: it for it in json.load(open("work/inventory.json"))["items"]}
lines = []
for sku in sorted(old.keys() | new.keys()):
    if sku not in new:
        lines.append(f"{sku} removed")
    elif sku not in old:
        lines.append(f"{sku} added")
    else:
        for field in ("price", "qty"):
            if old[sku][field] != new[sku][field]:
                lines.append(f"{sku} {field} {json.dumps(old[sku][field])}->{json.dumps(new[sku][field])}")
open("work/changes.txt", "w").write("".join(l + "\n" for l in lines))
PY
