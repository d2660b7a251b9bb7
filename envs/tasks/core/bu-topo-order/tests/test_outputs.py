import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_order():
    r = run(["./order.sh", "deps.txt"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["core", "config", "docs", "fixtures", "utils", "lib", "app", "tests"]

def test_other_graph():
    (WS / "g2.txt").write_text("b: a\nc: a\nd: b c\n\n# x: y\ne:\n")
    assert run(["./order.sh", "g2.txt"]).stdout.split() == ["a", "b", "c", "d", "e"]

def test_cycle():
    (WS / "g3.txt").write_text("a: b\nb: c\nc: a\nd:\n")
    r = run(["./order.sh", "g3.txt"])
    assert r.returncode == 2 and r.stdout == "" and "cycle" in r.stderr
