import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def git(*args, repo="repo"):
    r = run(["git", "-C", str(WS / repo), *args])
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()

def test_commit():
    assert git("log", "-1", "--format=%s") == "update app"
    assert git("show", "--format=", "--name-only", "HEAD") == "src/app.py"
    assert git("show", "HEAD:src/app.py") == "def main():\n    return 2"

def test_notes_uncommitted():
    assert git("show", "HEAD:notes.txt") == "notes v1"
    assert (WS / "repo" / "notes.txt").read_text() == "notes v2 (draft)\n"
    assert git("status", "--porcelain") == "M notes.txt"
