import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import re

def test_cron():
    lines = [l for l in (WS / "backup.cron").read_text().splitlines() if l.strip() and not l.lstrip().startswith("#")]
    assert len(lines) == 1
    f = lines[0].split(None, 5)
    assert f[0] == "30" and f[1] == "2" and f[2] == "*" and f[3] == "*" and f[4] in ("0", "7", "sun", "Sun", "SUN")
    cmd = f[5]
    assert cmd.startswith("/opt/backup/run.sh --full")
    assert re.search(r">>\s*/var/log/backup\.log\s+2>&1\s*$", cmd) or re.search(r"&>>\s*/var/log/backup\.log\s*$", cmd)
