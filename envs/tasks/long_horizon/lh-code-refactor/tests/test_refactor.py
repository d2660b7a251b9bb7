import ast
import hashlib
import os
import pathlib
import subprocess
import sys
import warnings

import pytest

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
sys.path.insert(0, str(WS))
TESTS_SHA = "5e7d76e8b764fee17c737884eb1e1cdae0ef5cbd714035b6887f126fbbb2d7c4"
BILLING = WS / "billing"


def run(*args):
    return subprocess.run([sys.executable, "-B", *args], cwd=WS, capture_output=True, text=True, timeout=60)


def src(name):
    return (BILLING / name).read_text()


def test_tests_untouched_and_layout():
    assert hashlib.sha256((WS / "tests/test_billing.py").read_bytes()).hexdigest() == TESTS_SHA
    assert sorted(p.name for p in (WS / "tests").iterdir() if p.name != "__pycache__") == ["test_billing.py"]
    assert sorted(p.name for p in WS.iterdir() if p.name != "__pycache__") == ["REFACTOR.md", "billing", "tests"]
    assert sorted(p.name for p in BILLING.iterdir() if p.name != "__pycache__") == ["__init__.py", "cli.py", "invoice.py", "money.py", "report.py", "utils.py"]


def test_money_module():
    import billing.money as m

    assert m.__all__ == ["VAT_RATE", "compute_total", "fmt_money"]
    assert m.VAT_RATE == 0.19
    assert m.compute_total([1, 2, 3.5]) == 6.5
    for x, want in [(1234.5, "1,234.50"), (-3, "-3.00"), (0, "0.00"), (1000000, "1,000,000.00"), (12.3456, "12.35"), (999.999, "1,000.00")]:
        assert m.fmt_money(x) == want
    tree = ast.parse(src("money.py"))
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert sorted(f.name for f in funcs) == ["compute_total", "fmt_money"]
    assert all(ast.get_docstring(f) for f in funcs)


def test_no_old_names_outside_shim():
    for name in ("money.py", "invoice.py", "report.py", "cli.py", "__init__.py"):
        text = src(name)
        assert "calc_total" not in text and "deprecated_round" not in text, name
        assert "billing.utils" not in text and "import utils" not in text, name
    for name in ("invoice.py", "report.py"):
        assert "0.19" not in src(name)
    assert "deprecated_round" not in src("utils.py")


def test_shim():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import billing.money as m
        import billing.utils as u
    assert u.calc_total is m.compute_total and u.compute_total is m.compute_total and u.fmt_money is m.fmt_money
    tree = ast.parse(src("utils.py"))
    assert not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body)


def test_behaviour():
    from billing.invoice import invoice_total, render
    from billing.report import vat_share

    assert invoice_total([("a", 100.0), ("b", 50.0)]) == 178.5
    assert vat_share([100.0, 100.0]) == 38.0
    assert render([("a", 1000.0)]) == "a: 1,000.00\nTOTAL: 1,190.00"
    assert run("-m", "billing.cli", "10", "20").stdout == "Total: 35.70\n"
    assert run("-m", "billing.cli", "1000").stdout == "Total: 1,190.00\n"


def test_old_tests_and_notes():
    r = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
    assert r.returncode == 0, r.stdout[-2000:]
    assert (WS / "REFACTOR.md").read_text().splitlines() == ["utils.py -> money.py", "calc_total -> compute_total"]


@pytest.mark.parametrize("module", ["billing.money", "billing.utils", "billing.invoice", "billing.report", "billing.cli"])
def test_importable(module):
    assert run("-c", f"import {module}").returncode == 0
