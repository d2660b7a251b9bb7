import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import sys
sys.path.insert(0, str(WS))
from money import format_price

def test_values():
    assert format_price(123450) == "$1,234.50"
    assert format_price(5) == "$0.05"
    assert format_price(100) == "$1.00"
    assert format_price(-305) == "-$3.05"
    assert format_price(123456789) == "$1,234,567.89"
    assert format_price(0) == "$0.00"
