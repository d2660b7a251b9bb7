python3 - <<'PY'
import csv, json
rows = list(csv.DictReader(open("out/clean_rev.csv")))
rejected = sum(1 for _ in open("out/rejected.csv"))
by_region = {}
for r in rows:
    by_region[r["region"]] = by_region.get(r["region"], 0) + float(r["revenue"])
summary = {
    "rows": len(rows),
    "rejected": rejected,
    "revenue": round(sum(float(r["revenue"]) for r in rows), 2),
    "best_region": max(by_region, key=by_region.get),
}
json.dump(summary, open("out/summary.json", "w"), indent=2)
PY
