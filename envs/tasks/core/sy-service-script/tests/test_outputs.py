import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import os, time

def svc(arg):
    return run(["./svc.sh", arg], timeout=20)

def pid():
    return int((WS / "worker.pid").read_text().strip())

def test_lifecycle():
    assert os.access(WS / "svc.sh", os.X_OK)
    r = svc("status")
    assert r.stdout.strip() == "stopped" and r.returncode == 3
    r = svc("start")
    assert r.stdout.strip() == "started" and r.returncode == 0
    p = pid()
    os.kill(p, 0)
    r = svc("start")
    assert r.stdout.strip() == "already running" and pid() == p
    r = svc("status")
    assert r.stdout.strip() == "running" and r.returncode == 0
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not ((WS / "worker.out").exists() and (WS / "worker.out").read_text().count("\n") >= 2):
        time.sleep(0.1)
    assert (WS / "worker.out").read_text().count("\n") >= 2
    r = svc("stop")
    assert r.stdout.strip() == "stopped"
    assert not (WS / "worker.pid").exists()
    time.sleep(0.3)
    try:
        os.kill(p, 0)
        alive = open(f"/proc/{p}/stat").read().split(")")[1].split()[0] != "Z"
    except ProcessLookupError:
        alive = False
    assert not alive, "worker still running after stop"
    r = svc("status")
    assert r.stdout.strip() == "stopped" and r.returncode == 3
