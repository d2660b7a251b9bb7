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

def test_merged():
    assert (WS / "repo" / "settings.ini").read_text() == "[app]\nname = demo\ntimeout = 60\ncache = on\nlog_level = debug\n"
    parents = git("log", "-1", "--format=%P").split()
    assert len(parents) == 2
    assert set(parents) == {git("rev-parse", "feature"), git("rev-parse", "HEAD^1")}
    assert git("log", "-1", "--format=%s", "HEAD^1") == "tune main"
    assert git("symbolic-ref", "HEAD") == "refs/heads/main"
    assert git("status", "--porcelain") == ""
