cat > textkit/__init__.py <<'PY'
from textkit.parse import parse_kv
from textkit.roman import from_roman, to_roman
from textkit.slug import slugify
from textkit.stats import mean, median
from textkit.wrap import wrap

__version__ = "0.2.0"
__all__ = ["from_roman", "mean", "median", "parse_kv", "slugify", "to_roman", "wrap"]
PY
