import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_backup():
    names = sorted(p.name for p in (WS / "backup").iterdir())
    assert names == ["db.conf", "log.conf", "web.conf"]
    for n in names:
        assert (WS / "backup" / n).read_bytes() == (WS / "etc" / n).read_bytes()

def test_originals_kept():
    assert sorted(p.name for p in (WS / "etc").iterdir()) == ["db.conf", "log.conf", "notes.txt", "old.conf.bak", "web.conf"]
    assert (WS / "etc" / "web.conf").read_text() == "port=80\nhost=a\n"
