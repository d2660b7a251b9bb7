#!/usr/bin/env bash
set -euo pipefail
mkdir -p tool/core
cat > tool/cli.py <<'EOF'
import sys

from tool.core.count import count_words


def main():
    print(count_words(open(sys.argv[1]).read()))


if __name__ == "__main__":
    main()
EOF
cat > tool/core/count.py <<'EOF'
from .normalize import normalize


def count_words(text):
    return len(normalize(text).split())
EOF
cat > tool/core/normalise.py <<'EOF'
def normalize(text):
    return " ".join(text.replace("-", " ").split())
EOF
touch tool/__init__.py
printf 'a b-c  d\ne\n' > data.txt
