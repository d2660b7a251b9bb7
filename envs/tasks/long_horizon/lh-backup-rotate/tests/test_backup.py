import hashlib
import os
import pathlib
import stat
import subprocess
import tarfile
import tempfile

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
DAILY = WS / "backups/daily"
DATA = {
    "data/notes/todo.txt": b"- buy milk\n- call bob\n",
    "data/projects/alpha/README": b"Alpha project.\n",
    "data/projects/alpha/main.py": b'print("alpha v2")\n',
    "data/projects/beta/data.csv": b"id,value\n1,10\n2,20\n",
    "data/projects/beta/new.txt": b"new file\n",
}


def tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def members(path):
    with tarfile.open(path, "r:gz") as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_data_and_monthly_untouched():
    assert tree(WS / "data") == {k.removeprefix("data/"): v for k, v in DATA.items()}
    assert os.listdir(WS / "backups/monthly") == ["data-2024-02-01.tar.gz"]
    old = members(WS / "backups/monthly/data-2024-02-01.tar.gz")
    assert sorted(old) == ["data/notes/old.txt", "data/notes/todo.txt", "data/projects/alpha/README", "data/projects/alpha/main.py", "data/projects/beta/data.csv"]
    assert sorted(os.listdir(WS)) == ["backups", "data", "restore", "rotate.sh"]


def test_todays_archive():
    assert members(DAILY / "data-2024-03-15.tar.gz") == DATA
    r = subprocess.run(["sha256sum", "-c", "data-2024-03-15.sha256"], cwd=DAILY, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "data-2024-03-15.tar.gz: OK\n"
    assert (DAILY / "data-2024-03-15.list").read_text() == "".join(f"{k}\n" for k in sorted(DATA))


def test_restore():
    assert tree(WS / "restore") == {"VERIFIED": b"OK\n", **DATA}


def test_changed():
    assert (DAILY / "data-2024-03-15.changed").read_text().splitlines() == [
        "D data/notes/old.txt",
        "M data/notes/todo.txt",
        "M data/projects/alpha/main.py",
        "A data/projects/beta/new.txt",
    ]


def test_rotation():
    assert sorted(os.listdir(DAILY)) == sorted(
        ["data-2024-03-13.tar.gz", "data-2024-03-13.sha256", "data-2024-03-14.tar.gz", "data-2024-03-14.sha256", "data-2024-03-15.tar.gz", "data-2024-03-15.sha256", "data-2024-03-15.list", "data-2024-03-15.changed"]
    )
    assert (WS / "backups/retention.log").read_text().splitlines() == sorted(f"deleted data-2024-03-{d}.{e}" for d in (10, 11, 12) for e in ("sha256", "tar.gz"))
    for f in DAILY.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o444, f


def test_rotate_script_on_a_copy():
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        for day in ("2023-12-31", "2024-01-05", "2024-01-20", "2024-02-01"):
            (d / f"data-{day}.tar.gz").write_text("x")
            (d / f"data-{day}.sha256").write_text("x")
        (d / "data-2023-12-31.list").write_text("x")
        (d / "data-2024-01-05.changed").write_text("x")
        (d / "notes.txt").write_text("keep me")
        r = subprocess.run(["bash", str(WS / "rotate.sh"), str(d), "2"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert sorted(os.listdir(d)) == ["data-2024-01-20.sha256", "data-2024-01-20.tar.gz", "data-2024-02-01.sha256", "data-2024-02-01.tar.gz", "notes.txt"]
        assert r.stdout.splitlines() == sorted(
            ["deleted data-2023-12-31.tar.gz", "deleted data-2023-12-31.sha256", "deleted data-2023-12-31.list", "deleted data-2024-01-05.tar.gz", "deleted data-2024-01-05.sha256", "deleted data-2024-01-05.changed"]
        )


def test_latest_index_verify():
    latest = WS / "backups/latest"
    assert latest.is_symlink() and os.readlink(latest) == "daily/data-2024-03-15.tar.gz"
    rows = (WS / "backups/index.csv").read_text().splitlines()
    assert rows[0] == "file,bytes,sha256"
    want = []
    for name in ("data-2024-03-13.tar.gz", "data-2024-03-14.tar.gz", "data-2024-03-15.tar.gz"):
        b = (DAILY / name).read_bytes()
        want.append(f"{name},{len(b)},{hashlib.sha256(b).hexdigest()}")
    assert rows[1:] == want
    assert (WS / "backups/verify.txt").read_text().splitlines() == [f"data-2024-03-{d}.tar.gz: OK" for d in (13, 14, 15)]
