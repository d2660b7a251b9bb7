import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import sqlite3

def test_answer():
    assert (WS / "answer.txt").read_text().split() == ["Ben", "Mia"]

def test_db_intact():
    con = sqlite3.connect(f"file:{WS / 'shop.db'}?mode=ro", uri=True)
    assert con.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 15
