import csv
import hashlib
import io
import os
import pathlib
import sqlite3
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
MIGRATIONS = {
    "001_add_status.sql": "04e65fbe63210790328bd65b02673c5f0605d65c0c4dc4a4f9791eaee1779b91",
    "002_orders_index.sql": "2f383e1117aab9da9a4964c2d6afb2dd545402fde71bdb248128c5f6fe0628ae",
    "003_add_currency.sql": "7e03f5fb3c34b2151de936b7e2afdf4f5e20050e1cd6b3a717d09fe4631c469a",
    "004_payments.sql": "2bcd09f0fff7162d4ade559301c917f09c311c6f55c5522736173f1e06f84ba4",
}
EMAILS = ["ada", "bo", "cy", "di", "ed", "flo", "gus", "hal", "ivy", "jo", "kit", "lu"]
ORDERS = {1: (1, 19.99), 2: (1, 5.0), 3: (2, 42.5), 4: (3, -3.0), 5: (3, 12.25), 6: (4, 0.0), 7: (5, 7.75), 8: (5, 7.75), 9: (5, 100.0), 10: (6, 3.1),
          11: (7, 55.0), 12: (8, -10.0), 13: (8, 20.0), 14: (9, 9.99), 15: (9, 0.01), 16: (11, 31.4), 17: (11, 8.6), 18: (12, 64.0), 19: (2, 1.5), 20: (7, 14.0)}
NAMES = ["Ada", "Bo", "Cy", "Di", "Ed", "Flo", "Gus", "Hal", "Ivy", "Jo", "Kit", "Lu"]


def db():
    return sqlite3.connect(f"file:{WS / 'db/app.db'}?mode=ro", uri=True)


def cols(con, table):
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


def test_untouched_and_layout():
    for name, sha in MIGRATIONS.items():
        assert hashlib.sha256((WS / "migrations" / name).read_bytes()).hexdigest() == sha
    assert sorted(os.listdir(WS / "migrations")) == sorted(MIGRATIONS)
    assert sorted(os.listdir(WS)) == ["db", "exports", "fixes", "migrations"]
    assert sorted(os.listdir(WS / "fixes")) == ["003_add_currency.sql", "005_lowercase_emails.sql", "006_reject_orders.sql"]


def test_migrations_recorded():
    con = db()
    assert [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY version")] == ["001", "002", "003", "004", "005", "006"]
    assert cols(con, "schema_migrations") == ["version"]


def test_schema():
    con = db()
    assert cols(con, "users") == ["id", "name", "email", "status"]
    assert cols(con, "orders") == ["id", "user_id", "amount", "created", "currency"]
    assert cols(con, "orders_rejected") == cols(con, "orders")
    assert cols(con, "payments") == ["id", "order_id", "paid_at"]
    idx = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'orders'")]
    assert "idx_orders_user" in idx
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_data():
    con = db()
    users = con.execute("SELECT id, name, email, status FROM users ORDER BY id").fetchall()
    assert users == [(i + 1, NAMES[i], f"{EMAILS[i]}@example.com", "active") for i in range(12)]
    good = sorted((k, *v) for k, v in ORDERS.items() if v[1] > 0)
    bad = sorted((k, *v) for k, v in ORDERS.items() if v[1] <= 0)
    assert con.execute("SELECT id, user_id, amount FROM orders ORDER BY id").fetchall() == good
    assert con.execute("SELECT id, user_id, amount FROM orders_rejected ORDER BY id").fetchall() == bad
    assert {r[0] for r in con.execute("SELECT currency FROM orders")} == {"EUR"}


def expected_totals():
    rows = []
    for uid in range(1, 13):
        amounts = [a for u, a in ORDERS.values() if u == uid and a > 0]
        rows.append((uid, NAMES[uid - 1], len(amounts), round(sum(amounts), 2)))
    return rows


def test_view():
    con = db()
    assert cols(con, "user_totals") == ["user_id", "name", "orders", "total"]
    got = con.execute("SELECT user_id, name, orders, total FROM user_totals ORDER BY user_id").fetchall()
    want = expected_totals()
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert all(abs(g[3] - w[3]) < 1e-9 for g, w in zip(got, want))


def test_exports():
    text = (WS / "exports/user_totals.csv").read_text()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["user_id", "name", "orders", "total"]
    want = expected_totals()
    assert [(int(r[0]), r[1], int(r[2])) for r in rows[1:]] == [w[:3] for w in want]
    assert all(abs(float(r[3]) - w[3]) < 1e-9 for r, w in zip(rows[1:], want))
    schema = subprocess.run(["sqlite3", str(WS / "db/app.db"), ".schema"], capture_output=True, text=True).stdout
    assert (WS / "exports/schema.sql").read_text() == schema
    counts = (WS / "exports/counts.txt").read_text().splitlines()
    assert counts == ["orders 17", "orders_rejected 3", "payments 0", "schema_migrations 6", "users 12"]
