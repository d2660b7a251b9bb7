import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_upper():
    assert (WS / "NOTES_UPPER.txt").read_text() == "BUY MILK\nCALL ALICE AT 5PM\nFIX BUG #42\n"

def test_original():
    assert (WS / "notes.txt").read_text() == "buy milk\ncall Alice at 5pm\nfix bug #42\n"
