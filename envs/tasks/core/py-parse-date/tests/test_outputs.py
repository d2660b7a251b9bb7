import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import sys
import pytest
sys.path.insert(0, str(WS))
from dates import parse_date

def test_valid():
    assert parse_date("2024-03-09") == (2024, 3, 9)
    assert parse_date("1999-12-31") == (1999, 12, 31)
    assert parse_date("2024-02-29") == (2024, 2, 29)

@pytest.mark.parametrize("bad", ["2023-02-30", "2023-13-01", "24-01-01", "2024/01/01", "2024-1-1", "", "2024-01-01x", "abcd-ef-gh"])
def test_invalid(bad):
    with pytest.raises(ValueError):
        parse_date(bad)
