import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_clean():
    assert (WS / "clean.csv").read_text().splitlines() == [
        "city,day,temp", "oslo,1,3.5", "oslo,2,3.8", "oslo,3,4", "rome,1,15", "rome,2,17.25", "rome,3,16.1", "rome,4,16.1", "lima,1,20"]
