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

def test_main_unchanged():
    assert git("log", "--format=%s", "main").split("\n") == ["second", "first"]
    assert git("symbolic-ref", "HEAD") == "refs/heads/main"
    assert not (WS / "repo" / "login.txt").exists()

def test_feature():
    assert git("log", "-1", "--format=%s", "feature/login") == "add login stub"
    assert git("rev-parse", "feature/login~1") == git("rev-parse", "main")
    assert git("show", "feature/login:login.txt") == "TODO"
    assert git("diff", "--name-only", "main", "feature/login") == "login.txt"
