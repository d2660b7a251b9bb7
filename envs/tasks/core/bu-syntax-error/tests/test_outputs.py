import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import sys

def test_report():
    r = run([sys.executable, "report.py", "sales.csv"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "east: 1\nnorth: 17\nsouth: 5\n"
    (WS / "t2.csv").write_text("region,amount\nz,3\na,4\nz,1\n")
    assert run([sys.executable, "report.py", "t2.csv"]).stdout == "a: 4\nz: 4\n"
