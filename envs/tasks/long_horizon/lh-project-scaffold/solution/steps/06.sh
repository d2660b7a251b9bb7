cat > calcpkg/tests/test_parse.py <<'PY'
import pytest

from calc.parse import evaluate


def test_int():
    assert evaluate("3 + 4") == 7


def test_float():
    assert evaluate("2.5 * 2") == 5.0


def test_invalid():
    for bad in ["3 +", "a + 1", "1 % 2", "1  + 2"]:
        with pytest.raises(ValueError):
            evaluate(bad)
PY
