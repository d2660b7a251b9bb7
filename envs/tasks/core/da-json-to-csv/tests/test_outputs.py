import os
import pathlib
import subprocess

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", WS), shell=isinstance(cmd, str), capture_output=True, text=True, timeout=kw.pop("timeout", 30), **kw)

import csv, io

def test_csv():
    text = (WS / "records.csv").read_text()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows == [["id", "name", "email", "city"], ["1", "Ann", "ann@x.io", "Oslo"], ["2", "Smith, Bob", "", "Rome"],
                    ["3", 'Cy "The Guy"', "cy@y.io", ""], ["4", "Dee", "d@z.io", "Lima"]]
    assert text.splitlines()[0] == "id,name,email,city"
