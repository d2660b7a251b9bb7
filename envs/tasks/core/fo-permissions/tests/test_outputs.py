import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import stat

def test_scripts():
    for p in (WS / "scripts").iterdir():
        mode = p.stat().st_mode
        if p.suffix == ".sh":
            assert mode & stat.S_IXUSR, p.name
        else:
            assert not mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH), p.name

def test_key():
    assert stat.S_IMODE((WS / "secret.key").stat().st_mode) == 0o600
