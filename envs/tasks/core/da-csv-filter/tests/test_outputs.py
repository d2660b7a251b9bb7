import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_failed():
    assert (WS / "failed.csv").read_text() == "id,name,status,duration_s\n2,build-web,failed,30\n4,lint,failed,5\n6,test-web,failed,410\n"
