_TABLE = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (50, "L"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(n):
    """1..3999 -> Roman numeral."""
    if not 1 <= n <= 3999:
        raise ValueError("out of range")
    out = ""
    for value, sym in _TABLE:
        while n >= value:
            out += sym
            n -= value
    return out
