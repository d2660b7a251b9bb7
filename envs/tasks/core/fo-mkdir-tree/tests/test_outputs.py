import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_folders():
    for d in ("src", "docs", "tests"):
        assert (WS / "project" / d).is_dir(), d

def test_readme_empty():
    p = WS / "project" / "README.md"
    assert p.is_file() and p.stat().st_size == 0
