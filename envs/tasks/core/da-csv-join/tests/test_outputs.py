import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_report():
    assert (WS / "report.csv").read_text().splitlines() == [
        "name,orders,total", "carol,2,20.50", "alice,2,20.00", "bob,2,20.00", "dan,0,0.00"]
