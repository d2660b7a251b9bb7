import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_layout():
    got = {}
    for d in (WS / "inbox").iterdir():
        assert d.is_dir(), f"{d.name} is not a folder"
        got[d.name] = sorted(p.name for p in d.iterdir())
    assert got == {"pdf": ["report.PDF"], "txt": ["notes.txt", "todo.TXT"], "jpg": ["photo.jpg"],
                   "gz": ["data.tar.gz"], "other": ["LICENSE", "Makefile"], "mp3": ["song.mp3"]}
    assert (WS / "inbox" / "other" / "LICENSE").read_text() == "LICENSE\n"
