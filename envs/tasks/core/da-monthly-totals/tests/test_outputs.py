import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_monthly():
    assert (WS / "monthly.csv").read_text().splitlines() == [
        "month,total_eur", "2023-12,4.50", "2024-01,145.00", "2024-02,11.00", "2024-03,880.00"]
