import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_clean():
    assert (WS / "clean.conf").read_text() == "port = 8080\nhost = 0.0.0.0  # trailing comment stays\n\tname = app\nurl = http://x/#anchor\n"
