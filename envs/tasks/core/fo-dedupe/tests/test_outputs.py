import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_remaining():
    assert sorted(p.name for p in (WS / "photos").iterdir()) == ["a.jpg", "d1.jpg", "d2.jpg", "m.png", "solo.gif"]
    assert (WS / "photos" / "a.jpg").read_bytes() == b"AAA"
    assert (WS / "photos" / "d2.jpg").read_bytes() == b"DDDD"
