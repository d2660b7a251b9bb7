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
    p = subprocess.Popen(["./worker.sh"], cwd=WS)
    try:
        time.sleep(1.0)
        p.send_signal(signal.SIGHUP)
        time.sleep(0.7)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=5)
    finally:
        p.kill()
    assert rc == 0
    lines = log.read_text().split()
    assert lines[0] == "started" and lines[-1] == "stopping"
    assert "reloaded" in lines and lines.count("tick") >= 4
    i = lines.index("reloaded")
    assert "tick" in lines[i + 1:-1], "no work after the reload"
    n = len(lines)
    time.sleep(0.5)
    assert len(log.read_text().split()) == n
