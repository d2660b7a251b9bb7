mkdir -p calcpkg/bin
cat > calcpkg/bin/calc <<'PY'
#!/usr/bin/env python3
"""calc EXPR...: evaluates 'NUMBER OP NUMBER'."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
from calc.parse import evaluate  # noqa: E402

try:
    print(evaluate(" ".join(sys.argv[1:])))
except (ValueError, ZeroDivisionError) as e:
    print(f"calc: {e}", file=sys.stderr)
    sys.exit(1)
PY
chmod +x calcpkg/bin/calc
