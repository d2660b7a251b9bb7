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

def test_answer():
    head = git("rev-parse", "HEAD")
    assert head == "c0119dafe12a3f850c324c4e6b42ac42590de312", "the repository was modified"
    assert (WS / "answer.txt").read_text().strip() == git("rev-parse", "HEAD~3")
    assert git("log", "-1", "--format=%s", "HEAD~3") == "tune config"
