import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_bumped():
    assert (WS / "VERSION").read_text().strip() == "1.5.0"
    assert (WS / "setup.cfg").read_text() == "[metadata]\nname = app\nversion = 1.5.0\n\n[options]\ninstall_requires =\n    libfoo==1.4.2\n"
    assert (WS / "src/app/__init__.py").read_text() == '__version__ = "1.5.0"\nCOMPAT = "1.4.2"\n'
    assert (WS / "CHANGELOG.md").read_text() == "# Changelog\n\n## 1.4.2\n- fixes\n"
