import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_runs():
    r = run(["./tool.sh"])
    assert r.returncode == 0 and r.stdout == "tool ok\n"
    assert b"\r" not in (WS / "tool.sh").read_bytes()
