import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import json

def test_stats():
    got = json.loads((WS / "stats.json").read_text())
    assert got == {"/a": {"count": 4, "max": 1000, "median": 25}, "/b": {"count": 2, "max": 200, "median": 150},
                   "/c": {"count": 1, "max": 7, "median": 7}}
