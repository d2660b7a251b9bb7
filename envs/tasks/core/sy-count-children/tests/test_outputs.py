import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import subprocess, sys

def test_counts():
    code = "import subprocess, sys, time; ps = [subprocess.Popen(['sleep', '30']) for _ in range(3)]; print('ok', flush=True); time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ok"
        r = run(["./children.sh", str(parent.pid)])
        assert r.returncode == 0 and r.stdout.strip() == "3"
        leaf = subprocess.Popen(["sleep", "30"])
        try:
            assert run(["./children.sh", str(leaf.pid)]).stdout.strip() == "0"
        finally:
            leaf.kill()
    finally:
        parent.kill()
        subprocess.run(["pkill", "-P", str(parent.pid)])

def test_missing_pid():
    r = run(["./children.sh", "999999"])
    assert r.returncode == 1 and r.stdout == ""
