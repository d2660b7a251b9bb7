import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_emails():
    assert (WS / "emails.txt").read_text().split() == [
        "ann.lee@example.com", "bob@example.net", "bob_smith+work@mail.example.org", "carol-99@sub.domain.io", "dave@x.co"]
