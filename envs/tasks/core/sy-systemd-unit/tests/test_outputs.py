import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import configparser

def load():
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str
    cp.read_string((WS / "webapp.service").read_text())
    return cp

def test_unit():
    u = load()
    assert u["Unit"]["Description"] == "Demo web app"
    assert "network.target" in u["Unit"]["After"].split()
    s = u["Service"]
    assert s["ExecStart"].split() == ["/usr/bin/python3", "-m", "http.server", "8080"]
    assert s["User"] == "www-data" and s["WorkingDirectory"] == "/srv/webapp"
    assert s["Environment"].strip('"') == "APP_ENV=production"
    assert s["Restart"] == "on-failure" and s["RestartSec"] in ("5", "5s")
    assert "multi-user.target" in u["Install"]["WantedBy"].split()
