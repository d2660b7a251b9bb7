import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
REPO = WS / "repo"
V100_TAG = "fd2f7bcb85ec7630881b604939406d34febdc3f6"
V100_COMMIT = "c6ea30017557180e6c01f1412bac44a946a634fe"
OLD_MAIN = "382e54f2d32e9f9a077eeab02eeba75fac2df03a"
LICENSE = "MIT License\n\nCopyright (c) 2024 Example\n\nPermission is hereby granted, free of charge.\n"


def git(*args):
    r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout.strip()


def test_history_kept():
    assert git("rev-parse", "v1.0.0") == V100_TAG
    assert git("rev-parse", "v1.0.0^{commit}") == V100_COMMIT
    subprocess.run(["git", "-C", str(REPO), "merge-base", "--is-ancestor", OLD_MAIN, "main"], check=True)
    assert (REPO / "LICENSE").read_text() == LICENSE
    assert sorted(p.name for p in WS.iterdir()) == ["release.txt", "repo"]


def test_release_commits():
    log = git("log", "--format=%s|%an|%ae", "v1.0.0..release/1.1", "--no-merges").splitlines()[:4]
    subjects = [line.split("|")[0] for line in log]
    assert subjects == ["Update changelog", "Bump version to 1.1.0", "Fix divide", "Fix subtract"]
    assert all(line.endswith("|Release Bot|release@example.com") for line in log)
    assert git("config", "--local", "user.name") == "Release Bot"
    # each fix commit touches only calc.py
    for rev in ("release/1.1~2", "release/1.1~3"):
        assert git("show", "--format=", "--name-only", rev) == "calc.py"
    assert git("show", "--format=", "--name-only", "release/1.1~1") == "VERSION"


def test_code_fixed_on_main():
    src = git("show", "main:calc.py")
    ns = {}
    exec(compile(src, "calc.py", "exec"), ns)
    assert ns["subtract"](7, 2) == 5 and ns["divide"](7, 2) == 3.5 and ns["add"](2, 3) == 5 and ns["multiply"](3, 4) == 12
    assert git("show", "main:VERSION") == "1.1.0"


def test_changelog():
    subjects = git("log", "--reverse", "--no-merges", "--format=%s", "v1.0.0..release/1.1~1").splitlines()
    want = "# Changelog\n\n## 1.1.0\n" + "".join(f"- {s}\n" for s in subjects) + "\n## 1.0.0\n- Initial commit\n"
    assert git("show", "release/1.1:CHANGELOG.md") + "\n" == want
    assert subjects[:4] == ["Add old notes", "Add multiply", "Add divide", "Refactor subtract"]
    assert git("log", "-1", "--format=%s", "release/1.1") == "Update changelog"


def test_tag_and_merge():
    assert git("cat-file", "-t", "v1.1.0") == "tag"
    assert git("rev-parse", "v1.1.0^{commit}") == git("rev-parse", "release/1.1")
    assert git("tag", "-l", "--format=%(contents:subject)", "v1.1.0") == "Release 1.1.0"
    parents = git("log", "-1", "--format=%P", "main").split()
    assert parents == [OLD_MAIN, git("rev-parse", "release/1.1")]
    assert git("log", "-1", "--format=%s|%an", "main") == "Merge release/1.1|Release Bot"


def test_branches_and_state():
    branches = set(git("for-each-ref", "--format=%(refname:short)", "refs/heads").splitlines())
    assert branches == {"main", "release/1.1", "hotfix/1.1.1"}
    assert git("rev-parse", "hotfix/1.1.1") == git("rev-parse", "v1.1.0^{commit}")
    assert git("symbolic-ref", "--short", "HEAD") == "main"
    assert git("status", "--porcelain") == ""


def test_release_txt():
    lines = (WS / "release.txt").read_text().split()
    assert lines == [git("rev-parse", "v1.1.0^{commit}"), git("rev-list", "--count", "main")]
