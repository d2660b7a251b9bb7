"""render.py SRC.md TEMPLATE.html OUT.html: '# Title' line, paragraphs, [text](href) links."""
import html
import re
import sys

src, template, out = sys.argv[1:4]
lines = open(src).read().split("\n")
if not lines[0].startswith("# "):
    sys.exit(f"{src}: the first line must be '# Title'")
title = lines[0][2:].strip()
paras, cur = [], []
for line in lines[1:]:
    if line.strip():
        cur.append(line.strip())
    elif cur:
        paras.append(" ".join(cur))
        cur = []
if cur:
    paras.append(" ".join(cur))


def para(text):
    text = html.escape(text, quote=False)
    return "<p>" + re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r'<a href="\2">\1</a>', text) + "</p>"


page = open(template).read().replace("{{title}}", html.escape(title)).replace("{{body}}", "\n".join(para(p) for p in paras))
open(out, "w").write(page)
