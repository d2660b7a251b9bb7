import hashlib
import os
import pathlib
import subprocess
import sys
import tarfile

import pytest

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
PKG = WS / "calcpkg"
sys.path.insert(0, str(PKG / "src"))
LICENSE_SHA = "aeca2f05c55d05b3519b7d0b54d530edf843cdac84dc068dba8aa5db345bc291"


def run(args, cwd=PKG):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)


def project_files():
    return [p for p in PKG.rglob("*") if p.is_file() and "__pycache__" not in p.parts and "dist" not in p.relative_to(PKG).parts]


def test_license_and_layout():
    assert hashlib.sha256((WS / "LICENSE").read_bytes()).hexdigest() == LICENSE_SHA
    assert (PKG / "LICENSE").read_bytes() == (WS / "LICENSE").read_bytes()
    assert sorted(os.listdir(WS)) == ["LICENSE", "calcpkg"]
    for rel in ("src/calc/__init__.py", "src/calc/ops.py", "src/calc/parse.py", "tests/test_ops.py", "tests/test_parse.py", "Makefile", "bin/calc", "README.md"):
        assert (PKG / rel).is_file(), rel


def test_ops():
    from calc import ops

    assert ops.add(2, 3) == 5 and ops.sub(2, 3) == -1 and ops.mul(4, 2.5) == 10.0 and ops.div(7, 2) == 3.5
    with pytest.raises(ZeroDivisionError):
        ops.div(1, 0)


@pytest.mark.parametrize("expr,want", [("3 + 4", 7), ("-2 * 3", -6), ("2.5 * 2", 5.0), ("7 / 2", 3.5), ("10 - 12", -2), ("1.5 + 1.5", 3.0)])
def test_evaluate(expr, want):
    from calc.parse import evaluate

    got = evaluate(expr)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("bad", ["", "3 +", "a + 1", "1 % 2", "1  + 2", "1 + 2 + 3", "1+2", "1e3 + 1", " 1 + 2"])
def test_evaluate_rejects(bad):
    from calc.parse import evaluate

    with pytest.raises(ValueError):
        evaluate(bad)


def test_version_single_source():
    import calc

    assert calc.__version__ == "0.1.0"
    hits = [p for p in project_files() if b"0.1.0" in p.read_bytes()]
    assert len(hits) == 1 and hits[0].read_bytes().count(b"0.1.0") == 1, hits
    assert run(["make", "-s", "version"]).stdout.strip() == "0.1.0"


def test_own_tests():
    def count(name):
        return sum(line.startswith("def test_") for line in (PKG / "tests" / name).read_text().splitlines())

    assert count("test_ops.py") >= 4 and count("test_parse.py") >= 3
    r = run(["make", "-s", "test"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_cli():
    calc = PKG / "bin" / "calc"
    assert os.access(calc, os.X_OK)
    r = run([str(calc), "3", "+", "4"], cwd="/")
    assert r.returncode == 0 and r.stdout == "7\n"
    assert run([str(calc), "7", "/", "2"], cwd="/").stdout == "3.5\n"
    r = run([str(calc), "3", "%", "4"], cwd="/")
    assert r.returncode == 1 and r.stdout == "" and r.stderr


def test_dist():
    with tarfile.open(PKG / "dist" / "calc-0.1.0.tar.gz", "r:gz") as tar:
        names = {m.name.removeprefix("./").rstrip("/") for m in tar.getmembers() if m.isfile() and "__pycache__" not in m.name}
    required = {f"calc-0.1.0/{p}" for p in ("LICENSE", "Makefile", "bin/calc", "src/calc/__init__.py", "src/calc/ops.py", "src/calc/parse.py", "tests/test_ops.py", "tests/test_parse.py")}
    assert required <= names
    allowed = ("calc-0.1.0/LICENSE", "calc-0.1.0/Makefile", "calc-0.1.0/bin/", "calc-0.1.0/src/", "calc-0.1.0/tests/")
    assert all(n in allowed or n.startswith(allowed) for n in names), names


def test_readme():
    lines = (PKG / "README.md").read_text().splitlines()
    assert lines[0] == "# calc"
    assert "## Usage" in lines and "## Development" in lines
    assert lines.index("## Usage") < lines.index("## Development")
