import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_flat():
    got = {p.name: p.read_text() for p in (WS / "flat").iterdir()}
    assert got == {"one.txt": "one\n", "two.txt": "two\n", "three.md": "three\n", "four.csv": "four\n", "five.txt": "five\n"}

def test_nested_gone():
    assert not (WS / "nested").exists()
