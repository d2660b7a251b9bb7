import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import random, signal, sys
import pytest
sys.path.insert(0, str(WS))
from search import find


def _timeout(signum, frame):
    raise TimeoutError("find() did not return within 5 s")


@pytest.fixture(autouse=True)
def deadline():
    old = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)

def test_random():
    r = random.Random(0)
    for _ in range(300):
        xs = sorted(r.randint(0, 20) for _ in range(r.randint(0, 30)))
        t = r.randint(-1, 21)
        expect = xs.index(t) if t in xs else -1
        assert find(xs, t) == expect, (xs, t)

def test_logarithmic():
    class Probe(list):
        reads = 0
        def __getitem__(self, i):
            Probe.reads += 1
            return list.__getitem__(self, i)
    xs = Probe(range(0, 2_000_000, 2))
    assert find(xs, 1_234_568) == 617284
    assert find(xs, 7) == -1
    assert Probe.reads < 200
