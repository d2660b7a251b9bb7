python3 - <<'PY'
import re
chapters = open("book/chapters.txt").read().split()
text = open("book/book.md").read()
def anchor(h):
    return re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
heads = re.findall(r"^# (Chapter \d+: .*)$", text, re.M)
target = {name: anchor(h) for name, h in zip(chapters, heads)}
text = re.sub(r"\]\(([^)#]+\.md)\)", lambda m: f"](#{target[m.group(1)]})", text)
open("book/book.md", "w").write(text)
PY
