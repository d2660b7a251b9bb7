import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_success():
    r = run(["./pipeline.sh", "in.txt"])
    assert r.returncode == 0 and r.stdout == "done\n"
    assert (WS / "out.txt").read_text() == "a\nb\n"

def test_failure_propagates():
    r = run(["./pipeline.sh", "missing.txt"])
    assert r.returncode != 0
    assert "done" not in r.stdout
