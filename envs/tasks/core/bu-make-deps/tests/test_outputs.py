import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import os, time

def touch_future(p, k):
    t = time.time() + 10 * k
    os.utime(p, (t, t))

def html():
    return (WS / "site/index.html").read_text()

def test_rebuilds():
    assert run(["make"]).returncode == 0
    assert html() == "# Home\n# About\n"
    (WS / "template.html").write_text("<body>\n{{BODY}}\n</body>\n")
    touch_future(WS / "template.html", 1)
    assert run(["make"]).returncode == 0
    assert html() == "<body>\n# Home\n# About\n</body>\n"
    (WS / "pages/c.md").write_text("# New\n")
    touch_future(WS / "pages/c.md", 2)
    assert run(["make"]).returncode == 0
    assert html() == "<body>\n# Home\n# About\n# New\n</body>\n"
    (WS / "pages/b.md").write_text("# About us\n")
    touch_future(WS / "pages/b.md", 3)
    assert run(["make"]).returncode == 0
    assert "# About us" in html()
