python3 - <<'PY'
import re
def anchor(h):
    return re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
out = []
for line in open("book/book.md").read().splitlines():
    if line.startswith("# Chapter "):
        h = line[2:]
        out.append(f"- [{h}](#{anchor(h)})")
    elif line.startswith("## "):
        h = line[3:]
        out.append(f"  - [{h}](#{anchor(h)})")
open("book/toc.md", "w").write("\n".join(out) + "\n")
PY
