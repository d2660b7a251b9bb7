import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import signal, subprocess, time

def test_signals():
    log = WS / "worker.log"
    log.unlink(missing_ok=True)
    def lines():
        return log.read_text().split() if log.exists() else []

    def wait_for(cond):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not cond():
            time.sleep(0.05)
        assert cond(), lines()

    p = subprocess.Popen(["./worker.sh"], cwd=WS)
    try:
        wait_for(lambda: lines().count("tick") >= 3)
        p.send_signal(signal.SIGHUP)
        wait_for(lambda: "reloaded" in lines() and "tick" in lines()[lines().index("reloaded") + 1:])
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=10)
    finally:
        p.kill()
    assert rc == 0
    got = lines()
    assert got[0] == "started" and got[-1] == "stopping"
    assert "reloaded" in got and got.count("tick") >= 4
    i = got.index("reloaded")
    assert "tick" in got[i + 1:-1], "no work after the reload"
    n = len(got)
    time.sleep(0.5)
    assert len(log.read_text().split()) == n
