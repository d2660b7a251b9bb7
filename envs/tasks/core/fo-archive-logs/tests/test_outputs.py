import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import tarfile

def test_archive():
    with tarfile.open(WS / "logs.tar.gz", "r:gz") as t:
        files = sorted(m.name for m in t.getmembers() if m.isfile())
        assert files == ["logs/app/app.log", "logs/db/db.log", "logs/sys.log"]
        assert t.extractfile("logs/db/db.log").read() == b"db\n"

def test_logs_unchanged():
    assert (WS / "logs" / "README").read_text() == "keep\n"
    assert (WS / "logs" / "app" / "cache.tmp").exists()
