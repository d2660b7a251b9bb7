def parse_kv(text):
    """'a=1; b = two' -> {'a': '1', 'b': 'two'}; empty items are ignored."""
    out = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        key, _, value = item.partition("=")
        out[key] = value.strip()
    return out
