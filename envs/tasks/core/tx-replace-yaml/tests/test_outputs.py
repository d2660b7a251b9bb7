import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_yaml():
    assert (WS / "config/app.yaml").read_text() == "name: bar_service\nurl: http://bar_service:80\nother: bar_services_old\n"
    assert (WS / "config/prod/a.yaml").read_text() == "svc: bar_service\n"

def test_others_unchanged():
    assert (WS / "config/dev/b.yml").read_text() == "svc: foo_service\n"
    assert (WS / "config/README.md").read_text() == "foo_service\n"
