import re


def slugify(text):
    """Lowercase, runs of non-alphanumerics become one '-', no '-' at either end."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower())
    return s.lstrip("-")
