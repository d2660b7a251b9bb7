import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import copy, sys
sys.path.insert(0, str(WS))
from config import deep_merge

BASE = {"db": {"host": "a", "port": 1, "opts": {"x": 1}}, "debug": False, "tags": ["a"]}
OVER = {"db": {"port": 2, "opts": {"y": 2}}, "debug": True, "new": {"k": "v"}}

def test_merge():
    assert deep_merge(copy.deepcopy(BASE), copy.deepcopy(OVER)) == {
        "db": {"host": "a", "port": 2, "opts": {"x": 1, "y": 2}}, "debug": True, "tags": ["a"], "new": {"k": "v"}}

def test_inputs_unchanged():
    b, o = copy.deepcopy(BASE), copy.deepcopy(OVER)
    out = deep_merge(b, o)
    assert b == BASE and o == OVER
    out["db"]["opts"]["z"] = 3
    out["new"]["k"] = "changed"
    assert b == BASE and o == OVER
