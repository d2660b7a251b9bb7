import csv
import hashlib
import json
import os
import pathlib
import re
import sqlite3
import subprocess
from decimal import Decimal

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
OUT = WS / "out"
RAW_SHA = {
    "sales_q1.csv": "27c468beb6f4f574f70f216bd0daa9420832e1796d21107b6da5dc0c5fcbffdb",
    "sales_q2.csv": "f41014f667d4dce11b090cbefae32d3d431b114a594dc70638c132fd6b5c1435",
}
HEADER = "date,region,product,units,unit_price"


def raw_rows():
    rows = []
    for name in ("sales_q1.csv", "sales_q2.csv"):
        rows += (WS / "raw" / name).read_text().splitlines()[1:]
    return rows


def ok(line):
    f = line.split(",")
    return len(f) == 5 and re.fullmatch(r"[0-9]+", f[3]) and re.fullmatch(r"[0-9]+(\.[0-9]+)?", f[4])


def clean():
    return [r.split(",") for r in raw_rows() if ok(r)]


def lines(name):
    return (OUT / name).read_text().splitlines()


def test_raw_untouched():
    assert sorted(p.name for p in (WS / "raw").iterdir()) == sorted(RAW_SHA)
    for name, sha in RAW_SHA.items():
        assert hashlib.sha256((WS / "raw" / name).read_bytes()).hexdigest() == sha


def test_nothing_outside_out():
    assert sorted(p.name for p in WS.iterdir()) == ["out", "raw"]


def test_all_rejected_clean():
    assert lines("all.csv") == [HEADER] + raw_rows()
    assert lines("rejected.csv") == [r for r in raw_rows() if not ok(r)]
    assert len(lines("rejected.csv")) == 6
    assert lines("clean.csv") == [HEADER] + [r for r in raw_rows() if ok(r)]


def test_clean_rev():
    want = [HEADER + ",revenue"] + [
        ",".join(f) + "," + str((Decimal(f[3]) * Decimal(f[4])).quantize(Decimal("0.01"))) for f in clean()
    ]
    assert lines("clean_rev.csv") == want


def totals(key):
    t = {}
    for f in clean():
        k = key(f)
        t[k] = t.get(k, Decimal(0)) + Decimal(f[3]) * Decimal(f[4])
    return t


def test_by_region_and_month():
    reg = totals(lambda f: f[1])
    assert lines("by_region.csv") == ["region,revenue"] + [f"{k},{v.quantize(Decimal('0.01'))}" for k, v in sorted(reg.items())]
    mon = totals(lambda f: f[0][:7])
    assert lines("by_month.csv") == ["month,revenue"] + [f"{k},{v.quantize(Decimal('0.01'))}" for k, v in sorted(mon.items())]


def test_top_products():
    u = {}
    for f in clean():
        u[f[2]] = u.get(f[2], 0) + int(f[3])
    got = [line.split() for line in lines("top_products.txt")]
    assert [(p, int(n)) for p, n in got] == sorted(u.items(), key=lambda kv: -kv[1])


def test_sqlite():
    con = sqlite3.connect(OUT / "sales.db")
    cols = [r[1] for r in con.execute("PRAGMA table_info(sales)")]
    assert cols == ["date", "region", "product", "units", "unit_price", "revenue"]
    rows = con.execute("SELECT date, region, product, units, unit_price, revenue FROM sales ORDER BY rowid").fetchall()
    assert len(rows) == 21
    for got, f in zip(rows, clean()):
        assert list(got[:3]) == f[:3]
        assert int(got[3]) == int(f[3]) and abs(float(got[4]) - float(f[4])) < 1e-9
        assert abs(float(got[5]) - float(f[3]) * float(f[4])) < 1e-6


def test_summary():
    s = json.loads((OUT / "summary.json").read_text())
    reg = totals(lambda f: f[1])
    assert s["rows"] == 21 and s["rejected"] == 6
    assert abs(s["revenue"] - float(sum(reg.values()))) < 0.005
    assert s["best_region"] == max(reg, key=reg.get)


def test_manifest():
    names = sorted(p.name for p in OUT.iterdir() if p.name != "MANIFEST")
    listed = [line.split()[-1].lstrip("*") for line in lines("MANIFEST")]
    assert listed == names
    r = subprocess.run(["sha256sum", "-c", "MANIFEST"], cwd=OUT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
