import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_default():
    r = run(["./run.sh"], env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout == "running default-app\n", r.stderr
    r = run(["/bin/bash", str(WS / "run.sh")], cwd="/", env={"PATH": "/usr/bin:/bin", "CONFIG_PATH": ""})
    assert r.stdout == "running default-app\n", r.stderr

def test_override():
    (WS / "other.ini").write_text("name=custom\n")
    r = run(["./run.sh"], env={"PATH": "/usr/bin:/bin", "CONFIG_PATH": str(WS / "other.ini")})
    assert r.stdout == "running custom\n"
