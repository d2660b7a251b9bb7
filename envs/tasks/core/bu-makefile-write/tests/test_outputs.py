import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import os, time

def touch_future(p, k):
    t = time.time() + 10 * k
    os.utime(p, (t, t))

def test_build_and_rebuild():
    assert run(["make", "clean"]).returncode == 0
    assert not (WS / "build").exists()
    r = run(["make"])
    assert r.returncode == 0, r.stderr
    assert (WS / "build/all.txt").read_text() == "two\nthree\none\n"
    assert (WS / "build/count.txt").read_text().strip() == "3"
    (WS / "src/c.txt").write_text("four\n")
    (WS / "src/a.txt").write_text("TWO\n")
    touch_future(WS / "src/c.txt", 1)
    touch_future(WS / "src/a.txt", 1)
    assert run(["make"]).returncode == 0
    assert (WS / "build/all.txt").read_text() == "TWO\none\nfour\n"
    assert (WS / "build/count.txt").read_text().strip() == "3"
    assert run(["make", "clean"]).returncode == 0 and not (WS / "build").exists()
