import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import json

def test_sessions():
    got = json.loads((WS / "sessions.json").read_text())
    assert got == {"ann": {"sessions": 2, "longest_s": 3000, "events": 5},
                   "bob": {"sessions": 2, "longest_s": 3599, "events": 4},
                   "cy": {"sessions": 1, "longest_s": 0, "events": 1}}
