import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import os

def test_link():
    p = WS / "current"
    assert p.is_symlink()
    assert os.readlink(p) in ("releases/v1.10.0", "releases/v1.10.0/")
    assert (p / "VERSION").read_text().strip() == "v1.10.0"
