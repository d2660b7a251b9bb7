import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
REPO = WS / "repo"
OLD_MAIN = "17f168992b9846c113edb85584ab1eb1c3783b3a"
V10 = "2b7a99c087c281981e0f339ba9171c481a9e59c9"
BAD = "7bfa8e44f9519b297fde6786636d62165043ee2d"
CHECK_SH = """#!/usr/bin/env bash
# Exit 0 when the app works.
cd "$(dirname "$0")" && python3 -B -c 'import app; assert app.total([1, 2, 3]) == 6 and app.total([]) == 0'
"""


def git(*args):
    r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout.strip()


def note(name):
    return (WS / "notes" / name).read_text().splitlines()


def test_history_and_files_kept():
    subprocess.run(["git", "-C", str(REPO), "merge-base", "--is-ancestor", OLD_MAIN, "main"], check=True)
    assert git("rev-parse", "v1.0") == V10
    assert (REPO / "check.sh").read_text() == CHECK_SH
    assert sorted(os.listdir(WS)) == ["notes", "repo"]
    assert sorted(os.listdir(WS / "notes")) == ["after_fix.txt", "first_bad.txt", "head.txt", "report.md"]


def test_notes():
    assert note("head.txt") == [OLD_MAIN, "fail"]
    assert note("first_bad.txt") == [BAD]
    assert note("after_fix.txt") == ["pass"]
    revert = git("rev-parse", "fix/total")
    assert note("report.md") == ["first bad: 7bfa8e4 Optimize total", f"reverted by: {revert[:7]}"]


def test_revert_and_merge():
    assert git("log", "-1", "--format=%s|%an|%ae", "fix/total") == 'Revert "Optimize total"|Bisect Bot|bisect@example.com'
    assert git("rev-parse", "fix/total~1") == OLD_MAIN
    assert f"This reverts commit {BAD}." in git("log", "-1", "--format=%B", "fix/total")
    assert git("log", "-1", "--format=%P", "main").split() == [OLD_MAIN, git("rev-parse", "fix/total")]
    assert git("log", "-1", "--format=%s|%an", "main") == "Merge fix/total|Bisect Bot"
    assert git("cat-file", "-t", "v1.0.2") == "commit" and git("rev-parse", "v1.0.2") == git("rev-parse", "main")


def test_state_and_behaviour():
    assert git("symbolic-ref", "--short", "HEAD") == "main"
    assert git("status", "--porcelain") == ""
    assert not (REPO / ".git" / "BISECT_LOG").exists() and not (REPO / ".git" / "BISECT_START").exists()
    assert subprocess.run(["bash", "check.sh"], cwd=REPO, capture_output=True).returncode == 0
    assert set(git("for-each-ref", "--format=%(refname:short)", "refs/heads").split()) == {"main", "fix/total"}
    assert git("config", "--local", "user.name") == "Bisect Bot"
