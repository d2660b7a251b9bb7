from textkit.parse import parse_kv
from textkit.roman import to_roman
from textkit.slug import slugify
from textkit.stats import mean, median
from textkit.wrap import wrap


def test_slugify():
    assert slugify("Hello, World!") == "hello-world"


def test_wrap():
    assert wrap("aa bb cc", 5) == ["aa bb", "cc"]


def test_stats():
    assert mean([1, 2, 3]) == 2
    assert median([4, 1, 3, 2]) == 2.5


def test_parse_kv():
    assert parse_kv("a=1; b = two") == {"a": "1", "b": "two"}


def test_roman():
    assert to_roman(1994) == "MCMXCIV"
