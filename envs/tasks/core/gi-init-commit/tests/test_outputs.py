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

def test_single_commit():
    assert git("rev-list", "--count", "HEAD", repo="project") == "1"
    assert git("log", "-1", "--format=%s", repo="project") == "initial import"
    assert git("rev-parse", "--abbrev-ref", "HEAD", repo="project") == "main"

def test_all_files_tracked():
    assert sorted(git("ls-files", repo="project").split()) == ["LICENSE", "README.md", "src/main.py"]
    assert git("status", "--porcelain", repo="project") == ""
