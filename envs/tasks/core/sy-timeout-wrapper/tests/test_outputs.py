import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import os, time

def test_exit_code_passes_through():
    assert os.access(WS / "limit.sh", os.X_OK)
    assert run(["./limit.sh", "5", "sh", "-c", "exit 7"]).returncode == 7
    r = run(["./limit.sh", "5", "echo", "hello world"])
    assert r.returncode == 0 and r.stdout == "hello world\n"

def test_kills_tree():
    t0 = time.monotonic()
    r = run(["./limit.sh", "1", "sh", "-c", "sleep 30 & echo $! > grandchild.pid; sleep 30"], timeout=25)
    assert r.returncode == 124
    assert time.monotonic() - t0 < 10
    gc = int((WS / "grandchild.pid").read_text())
    time.sleep(0.3)
    try:
        state = open(f"/proc/{gc}/stat").read().split(")")[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z"), "the command's child survived"
