import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import importlib, sys
sys.path.insert(0, str(WS))

def test_mean():
    stats = importlib.import_module("stats")
    assert stats.mean([2, 4, 6]) == 4
    assert stats.mean([5]) == 5
    assert abs(stats.mean([1.5, 2.5, 3.0, 5.0]) - 3.0) < 1e-12
    assert type(stats.mean([1, 2])) is float
