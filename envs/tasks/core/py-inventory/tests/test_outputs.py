import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import sys
import pytest
sys.path.insert(0, str(WS))
from inventory import Inventory

def make():
    inv = Inventory()
    inv.add("apple", 3)
    inv.add("pear", 4)
    return inv

def test_remove_and_total():
    inv = make()
    inv.remove("apple", 3)
    assert inv.count("apple") == 0 and inv.total() == 4
    assert "apple" not in inv.items

def test_remove_too_much():
    inv = make()
    with pytest.raises(ValueError):
        inv.remove("pear", 5)
    with pytest.raises(ValueError):
        inv.remove("kiwi", 1)
    assert inv.count("pear") == 4 and inv.total() == 7

def test_add_rejects():
    inv = make()
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError):
            inv.add("apple", bad)
    assert inv.count("apple") == 3

def test_visible_tests_still_pass():
    r = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inventory.py"])
    assert r.returncode == 0, r.stdout
    assert "1 passed" in r.stdout
