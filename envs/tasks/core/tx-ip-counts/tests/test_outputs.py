import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import collections, hashlib

def test_counts():
    log = (WS / "access.log").read_bytes()
    assert hashlib.sha256(log).hexdigest() == "2886344735d0cadc2660eecd396eff679f02fa73c9abfff6428a2dc7a2b8a5ea"
    c = collections.Counter(l.split()[0] for l in (WS / "access.log").read_text().splitlines())
    expect = [f"{ip} {n}" for ip, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))]
    assert len(expect) >= 5
    assert (WS / "ips.txt").read_text().splitlines() == expect
