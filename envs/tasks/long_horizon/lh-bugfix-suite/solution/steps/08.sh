cat > textkit/cli.py <<'PY'
import sys

from textkit.roman import to_roman
from textkit.slug import slugify
from textkit.stats import median


def main(argv):
    if not argv:
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "slug":
        print(slugify(" ".join(args)))
    elif cmd == "roman":
        print(to_roman(int(args[0])))
    elif cmd == "median":
        print(median([float(a) for a in args]))
    else:
        print(f"unknown command {cmd}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
