import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_ok():
    r = run(["bash", "-c", "set -a; . ./app.env; set +a; ./app.sh"], env={"PATH": "/usr/bin:/bin"})
    assert r.stdout.strip() == "OK", r.stdout

def test_app_unchanged():
    import hashlib
    assert hashlib.sha256((WS / "app.sh").read_bytes()).hexdigest() == "a715b594d863e6341d03d174c3d19c5d16e9b148a4c3f25e086d4860fcd6f009"
    r = run(["bash", "-c", "./app.sh"], env={"PATH": "/usr/bin:/bin"})
    assert r.stdout.startswith("FAIL")
