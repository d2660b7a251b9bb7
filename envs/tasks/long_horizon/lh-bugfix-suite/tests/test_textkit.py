import hashlib
import os
import pathlib
import subprocess
import sys

import pytest

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
sys.path.insert(0, str(WS))
PUBLIC_SHA = "b8b936cd653d515e6701c58991eedfc7ec335a917cd91e71db82e2b387472d7a"


def run(*args):
    return subprocess.run([sys.executable, "-B", *args], cwd=WS, capture_output=True, text=True, timeout=60)


def test_public_tests_untouched_and_layout():
    assert hashlib.sha256((WS / "tests" / "test_public.py").read_bytes()).hexdigest() == PUBLIC_SHA
    top = sorted(p.name for p in WS.iterdir() if p.name != "__pycache__")
    assert top == ["CHANGES.md", "tests", "textkit"]
    tests = sorted(p.name for p in (WS / "tests").iterdir() if p.name != "__pycache__")
    assert tests == ["test_public.py", "test_roman_extra.py"]


@pytest.mark.parametrize("text,want", [("--Hi!--", "hi"), ("Hello, World!", "hello-world"), ("  A  b  ", "a-b"), ("!!!", ""), ("x", "x")])
def test_slugify(text, want):
    from textkit.slug import slugify

    assert slugify(text) == want


def test_wrap():
    from textkit.wrap import wrap

    assert wrap("aa bb cc", 5) == ["aa bb", "cc"]
    assert wrap("aa bb", 4) == ["aa", "bb"]
    assert wrap("a bb ccc dddd eeeee", 4) == ["a bb", "ccc", "dddd", "eeeee"]
    assert wrap("", 3) == []
    text = "the quick brown fox jumps over the lazy dog " * 3
    for w in range(3, 20):
        out = wrap(text, w)
        assert " ".join(out).split() == text.split()
        assert all(len(line) <= w or " " not in line for line in out)


def test_stats():
    from textkit.stats import mean, median

    assert median([4, 1, 3, 2]) == 2.5
    assert median([5, 1, 3]) == 3
    assert median([2, 2]) == 2
    assert mean([1, 2]) == 1.5
    with pytest.raises(ValueError):
        median([])


def test_parse_kv():
    from textkit.parse import parse_kv

    assert parse_kv(" a = 1 ;b=2;; c =x=y ") == {"a": "1", "b": "2", "c": "x=y"}
    assert parse_kv("") == {}


def test_roman():
    from textkit.roman import from_roman, to_roman

    table = {1: "I", 4: "IV", 9: "IX", 14: "XIV", 40: "XL", 44: "XLIV", 90: "XC", 99: "XCIX", 400: "CD", 1994: "MCMXCIV", 3999: "MMMCMXCIX"}
    for n, s in table.items():
        assert to_roman(n) == s and from_roman(s) == n
    assert all(from_roman(to_roman(n)) == n for n in range(1, 4000))
    for bad in ["", "IIII", "IC", "abc", "VV", "MMMM", "iv", "XM"]:
        with pytest.raises(ValueError):
            from_roman(bad)
    with pytest.raises(ValueError):
        to_roman(0)


def test_package():
    import textkit

    assert textkit.__version__ == "0.2.0"
    assert textkit.__all__ == sorted(["slugify", "wrap", "mean", "median", "parse_kv", "to_roman", "from_roman"])
    assert textkit.from_roman("XL") == 40 and textkit.slugify("A B") == "a-b"


def test_cli():
    assert run("-m", "textkit.cli", "slug", "Hello World").stdout == "hello-world\n"
    assert run("-m", "textkit.cli", "roman", "1994").stdout == "MCMXCIV\n"
    assert run("-m", "textkit.cli", "median", "1", "2", "3", "4").stdout == "2.5\n"
    assert run("-m", "textkit.cli", "bogus").returncode == 2


def test_workspace_suite_passes():
    r = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
    assert r.returncode == 0, r.stdout[-2000:]
    assert "passed" in r.stdout and "failed" not in r.stdout
    r = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_roman_extra.py")
    assert r.returncode == 0 and int(r.stdout.split(" passed")[0].split()[-1]) >= 3


def test_changes():
    lines = (WS / "CHANGES.md").read_text().split("\n")
    lines = [line for line in lines if line.strip()]
    fixes = ["- fix: " + f for f in ("slugify", "wrap", "median", "parse_kv", "to_roman")]
    adds = ["- add: " + a for a in ("from_roman", "__init__", "cli", "tests")]
    assert sorted(lines) == sorted(fixes + adds)
