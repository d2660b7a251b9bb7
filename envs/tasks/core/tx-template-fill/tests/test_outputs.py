import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

def test_render():
    expect = ("Hello Dr. Jane O'Neil,\nyour order A-17/b ships to S\\u00e3o Paulo & Rio on 2024-01-02.\n"
              "Total: $12.50 = 10+2.50 ({{UNKNOWN}} stays)\nThanks, Dr. Jane O'Neil!\n")
    assert (WS / "out.txt").read_text() == expect
