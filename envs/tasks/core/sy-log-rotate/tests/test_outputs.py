import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def state():
    return {p.name: p.read_text() for p in (WS / "logs").iterdir()}

def test_rotation():
    assert run(["./rotate.sh"]).returncode == 0
    assert state() == {"app.log": "", "app.log.1": "gen0\n"}
    for g in range(1, 5):
        (WS / "logs" / "app.log").write_text(f"gen{g}\n")
        assert run(["./rotate.sh"]).returncode == 0
    assert state() == {"app.log": "", "app.log.1": "gen4\n", "app.log.2": "gen3\n", "app.log.3": "gen2\n"}
