import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import shutil

def test_make():
    shutil.rmtree(WS / "out", ignore_errors=True)
    r = run(["make"])
    assert r.returncode == 0, r.stderr
    assert (WS / "out/report.txt").read_text() == "alpha\nbeta\ngamma\n3\n"
