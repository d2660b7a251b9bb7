import csv
import hashlib
import json
import os
import pathlib

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
WORK = WS / "work"
ORIG_SHA = "fe64fd4d9a9509ed9a00e53f89eee83ce7f839f6b90eaa81ff89134b5df1e833"
FINAL = [
    ("A-110", "Anvil", "tools", 97.9, 1),
    ("B-200", "Bolts (100)", "hardware", 6.2, 0),
    ("C-300", "Chisel", "tools", 13.75, 7),
    ("D-808", "Drill bits", "tools", 21.89, 9),
    ("G-010", "Gloves", "safety", 4.99, 40),
    ("H-420", "Hammer", "tools", 25.74, 3),
    ("M-770", "Mask", "safety", 1.2, 2),
    ("N-055", "Nails (500)", "hardware", 3.75, 60),
    ("S-900", "Saw", "tools", 8.8, 4),
    ("T-010", "Tape", "hardware", 2.5, 25),
    ("X-100", "Xylophone", "toys", 49.9, 2),
]


def load(name):
    return json.loads((WORK / name).read_text())


def test_untouched_and_layout():
    assert hashlib.sha256((WS / "inventory.json").read_bytes()).hexdigest() == ORIG_SHA
    assert sorted(os.listdir(WS)) == ["inventory.json", "work"]
    assert sorted(os.listdir(WORK)) == sorted(["by_category.json", "changes.txt", "inventory.csv", "inventory.json", "low_stock.json", "report.txt"])


def test_inventory():
    inv = load("inventory.json")
    assert list(inv) == ["warehouse", "items"] and inv["warehouse"] == "north"
    got = [(i["sku"], i["name"], i["category"], i["price"], i["qty"]) for i in inv["items"]]
    assert [g[:3] + (g[4],) for g in got] == [f[:3] + (f[4],) for f in FINAL]
    assert all(abs(g[3] - f[3]) < 1e-9 for g, f in zip(got, FINAL))
    assert all(i["discontinued"] is False for i in inv["items"])
    assert all(list(i) == ["sku", "name", "category", "price", "qty", "discontinued"] for i in inv["items"])


def test_low_stock_and_categories():
    assert load("low_stock.json") == sorted(f[0] for f in FINAL if f[4] < 5)
    cats = {}
    for f in FINAL:
        cats[f[2]] = cats.get(f[2], 0) + f[3] * f[4]
    got = load("by_category.json")
    assert sorted(got) == sorted(cats)
    assert all(abs(got[k] - round(v, 2)) < 1e-9 for k, v in cats.items())


def test_csv():
    rows = list(csv.reader((WORK / "inventory.csv").open(newline="")))
    assert rows[0] == ["sku", "name", "category", "price", "qty"]
    assert rows[1:] == [[f[0], f[1], f[2], f"{f[3]:.2f}", str(f[4])] for f in FINAL]


def test_report():
    total = sum(f[3] * f[4] for f in FINAL)
    cats = ",".join(sorted({f[2] for f in FINAL}))
    assert (WORK / "report.txt").read_text().splitlines() == [f"items: {len(FINAL)}", f"total_value: {total:.2f}", f"categories: {cats}"]


def test_changes():
    want = [
        ("A-110", "price", 89.0, 97.9),
        ("B-200", "qty", 12, 0),
        ("C-300", "price", 12.5, 13.75),
        ("D-808", "price", 19.9, 21.89),
        ("H-420", "price", 23.4, 25.74),
        ("K-333", "removed"),
        ("O-001", "removed"),
        ("S-900", "price", 8.0, 8.8),
        ("X-100", "added"),
    ]
    got = (WORK / "changes.txt").read_text().splitlines()
    assert len(got) == len(want)
    for line, w in zip(got, want):
        parts = line.split(" ")
        assert parts[:2] == list(w[:2]), line
        if len(w) == 4:
            assert len(parts) == 3
            old, new = parts[2].split("->")
            assert abs(float(old) - w[2]) < 1e-9 and abs(float(new) - w[3]) < 1e-9, line
        else:
            assert len(parts) == 2, line
