import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import sys
sys.path.insert(0, str(WS))
import cart

def test_fresh_each_call():
    assert cart.add_item("a") == ["a"]
    assert cart.add_item("b") == ["b"]

def test_given_cart():
    c = ["x"]
    out = cart.add_item("y", c)
    assert out is c and c == ["x", "y"]
