import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import copy, sys
sys.path.insert(0, str(WS))
from people import sort_people

DATA = [{"name": "Zoe", "age": 30}, {"name": "Al", "age": 41}, {"name": "Bea", "age": 30}, {"name": "Cy", "age": 7}]

def test_sorted():
    got = sort_people(copy.deepcopy(DATA))
    assert [p["name"] for p in got] == ["Cy", "Bea", "Zoe", "Al"]

def test_input_untouched():
    data = copy.deepcopy(DATA)
    sort_people(data)
    assert data == DATA
