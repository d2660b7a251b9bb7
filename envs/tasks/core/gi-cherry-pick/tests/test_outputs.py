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

def test_main():
    assert git("symbolic-ref", "HEAD") == "refs/heads/main"
    assert git("rev-list", "--count", "main") == "2"
    assert git("log", "-1", "--format=%s", "main") == "fix: null check"
    assert git("show", "main:util.py") == "def get(d, k):\n    if d is None:\n        return None\n    return d[k]"
    assert "experiment.py" not in git("ls-tree", "-r", "--name-only", "main").split()
    assert len(git("log", "-1", "--format=%P", "main").split()) == 1

def test_hotfix_untouched():
    assert git("log", "--format=%s", "hotfix").split("\n") == ["fix: null check", "wip: experiment", "init"]
