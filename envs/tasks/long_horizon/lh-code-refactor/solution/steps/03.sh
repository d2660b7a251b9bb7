cat > billing/utils.py <<'PY'
"""Deprecated: use billing.money."""

from billing.money import *  # noqa: F401,F403
from billing.money import compute_total

calc_total = compute_total
PY
