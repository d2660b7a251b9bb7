import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import sys

def test_cli():
    r = run([sys.executable, "-m", "tool.cli", "data.txt"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "5"
    (WS / "other.txt").write_text("x-y z\n")
    assert run([sys.executable, "-m", "tool.cli", "other.txt"]).stdout.strip() == "3"
