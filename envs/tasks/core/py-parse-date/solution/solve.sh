#!/usr/bin/env bash
set -euo pipefail
cat > dates.py <<'EOF'
import datetime
import re


def parse_date(text):
    if not isinstance(text, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise ValueError(f"not a YYYY-MM-DD date: {text!r}")
    d = datetime.date(int(text[:4]), int(text[5:7]), int(text[8:]))
    return d.year, d.month, d.day
EOF
