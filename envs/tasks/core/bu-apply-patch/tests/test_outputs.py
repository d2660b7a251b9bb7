import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_patched():
    assert (WS / "src/geometry.py").read_text() == "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    assert (WS / "src/version.py").read_text() == 'VERSION = "0.2"\n'
    assert not (WS / "fix.patch").exists()
    assert not list(WS.rglob("*.orig")) and not list(WS.rglob("*.rej"))
