import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import sys
sys.path.insert(0, str(WS))
from fizz import fizzbuzz

def test_values():
    got = [fizzbuzz(i) for i in range(1, 31)]
    expect = ["FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i) for i in range(1, 31)]
    assert got == expect
    assert fizzbuzz(45) == "FizzBuzz" and fizzbuzz(7) == "7"
