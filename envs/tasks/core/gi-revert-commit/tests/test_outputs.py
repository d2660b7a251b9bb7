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

def test_reverted():
    assert (WS / "repo" / "config.ini").read_text() == "[server]\ntimeout = 30\nretries = 3\n"
    assert (WS / "repo" / "docs.md").read_text() == "docs\n"
    assert git("status", "--porcelain") == ""

def test_history_kept():
    msgs = git("log", "--format=%s").split("\n")
    assert len(msgs) == 4 and msgs[1:] == ["add docs", "break config", "init config"]
    assert git("show", "HEAD~1:config.ini") == "[server]\ntimeout = 0"
