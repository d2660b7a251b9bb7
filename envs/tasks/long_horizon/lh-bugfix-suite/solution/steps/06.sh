cat >> textkit/roman.py <<'PY'


def from_roman(s):
    """Roman numeral -> int; only canonical numerals (as to_roman writes them) are accepted."""
    if not isinstance(s, str) or not s:
        raise ValueError(f"not a Roman numeral: {s!r}")
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    if any(c not in values for c in s):
        raise ValueError(f"not a Roman numeral: {s!r}")
    total = 0
    for i, c in enumerate(s):
        v = values[c]
        total += -v if i + 1 < len(s) and values[s[i + 1]] > v else v
    if not 1 <= total <= 3999 or to_roman(total) != s:
        raise ValueError(f"not a canonical Roman numeral: {s!r}")
    return total
PY
