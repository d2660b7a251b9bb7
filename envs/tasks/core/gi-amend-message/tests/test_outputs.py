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

def test_amended():
    assert git("log", "-1", "--format=%s") == "Fix typo in README"
    assert git("rev-list", "--count", "HEAD") == "2"
    assert git("log", "-1", "--format=%s", "HEAD~1") == "init"
    assert git("rev-parse", "HEAD~1") == "e0a22c1efafd1c225b4e5c384657f1487f45be8f"
    assert git("rev-parse", "HEAD^{tree}") == "9c4c660705d792a88c2b28b3e3680bda79865828"
    assert git("status", "--porcelain") == ""
