import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import sys, time
import pytest
sys.path.insert(0, str(WS))
from cache import LRUCache

class Clock:
    def __init__(self):
        self.t = 0.0
    def __call__(self):
        return self.t

def test_capacity_validation():
    for bad in (0, -1, 1.5, "3", True):
        with pytest.raises(ValueError):
            LRUCache(bad)

def test_lru_order():
    c = LRUCache(2)
    c.put("a", 1); c.put("b", 2)
    assert c.get("a") == 1
    c.put("c", 3)
    assert c.get("b") is None and c.get("a") == 1 and c.get("c") == 3
    c.put("a", 10); c.put("d", 4)
    assert c.get("c") is None and c.get("a") == 10 and len(c) == 2
    assert c.stats() == {"hits": 4, "misses": 2, "evictions": 2}

def test_ttl():
    clk = Clock()
    c = LRUCache(3, ttl=5, clock=clk)
    c.put("a", 1); clk.t = 3; c.put("b", 2)
    clk.t = 4.9
    assert c.get("a") == 1 and len(c) == 2
    clk.t = 5.0
    assert c.get("a", "gone") == "gone" and len(c) == 1
    c.put("b", 3); clk.t = 9.9
    assert c.get("b") == 3
    clk.t = 10.0
    assert len(c) == 0
    assert c.stats() == {"hits": 2, "misses": 1, "evictions": 0}

def test_constant_time():
    c = LRUCache(50_000)
    t0 = time.perf_counter()
    for i in range(100_000):
        c.put(i, i)
        c.get(i // 2)
    assert time.perf_counter() - t0 < 10
    assert len(c) == 50_000 and c.stats()["evictions"] == 50_000
