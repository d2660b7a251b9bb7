cat > calcpkg/tests/test_ops.py <<'PY'
import pytest

from calc.ops import add, div, mul, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    assert sub(2, 3) == -1


def test_mul():
    assert mul(4, 2.5) == 10.0


def test_div():
    assert div(3, 2) == 1.5
    with pytest.raises(ZeroDivisionError):
        div(1, 0)
PY
