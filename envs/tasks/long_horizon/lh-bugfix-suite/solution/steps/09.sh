cat > tests/test_roman_extra.py <<'PY'
import pytest

from textkit.roman import from_roman, to_roman


def test_known():
    assert from_roman("MCMXCIV") == 1994


def test_round_trip():
    assert all(from_roman(to_roman(n)) == n for n in range(1, 4000))


@pytest.mark.parametrize("bad", ["", "IIII", "IC", "abc"])
def test_invalid(bad):
    with pytest.raises(ValueError):
        from_roman(bad)
PY
