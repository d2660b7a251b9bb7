import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import sys
sys.path.insert(0, str(WS))
from nest import flatten

def test_deep():
    assert flatten([1, [2, [3, [4, (5, 6)]]], "ab", [], [[["x"]]]]) == [1, 2, 3, 4, 5, 6, "ab", "x"]

def test_flat():
    assert flatten([]) == [] and flatten(["abc"]) == ["abc"]
