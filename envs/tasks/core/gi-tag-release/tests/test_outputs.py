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

def test_tag():
    assert git("cat-file", "-t", "v1.2.0") == "tag"
    assert git("rev-parse", "v1.2.0^{commit}") == git("rev-parse", "HEAD~1")
    assert git("tag", "-l", "--format=%(contents:subject)", "v1.2.0") == "Version 1.2.0"
    assert git("log", "-1", "--format=%s") == "start 1.3"
