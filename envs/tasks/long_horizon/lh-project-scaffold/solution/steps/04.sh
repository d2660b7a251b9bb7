cat > calcpkg/src/calc/parse.py <<'PY'
import re

from calc import ops

_NUM = re.compile(r"-?\d+(\.\d+)?")
_OPS = {"+": ops.add, "-": ops.sub, "*": ops.mul, "/": ops.div}


def _number(tok):
    if not _NUM.fullmatch(tok):
        raise ValueError(f"not a number: {tok!r}")
    return float(tok) if "." in tok else int(tok)


def evaluate(expr):
    if not isinstance(expr, str):
        raise ValueError("expression must be a string")
    parts = expr.split(" ")
    if len(parts) != 3 or parts[1] not in _OPS:
        raise ValueError(f"expected 'NUMBER OP NUMBER', got {expr!r}")
    return _OPS[parts[1]](_number(parts[0]), _number(parts[2]))
PY
