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

def test_untracked_but_present():
    files = git("ls-files").split()
    assert sorted(files) == [".gitignore", "src/main.c"]
    for p in ("build/app", "build/main.o", "cache.tmp", "src/x.tmp"):
        assert (WS / "repo" / p).is_file(), p

def test_ignored_and_clean():
    assert git("status", "--porcelain") == ""
    for p in ("build/new.bin", "deep/dir/a.tmp"):
        r = run(["git", "-C", str(WS / "repo"), "check-ignore", "-q", p])
        assert r.returncode == 0, p
    assert git("log", "-1", "--format=%s") == "ignore build artifacts"
    assert git("rev-list", "--count", "HEAD") == "2"
