cat > tools/index.sh <<'SH'
#!/usr/bin/env bash
# Prints the index page: one link per page, sorted by title.
set -euo pipefail
echo '<html><head><title>Index</title></head><body>'
echo '<ul>'
for f in src/pages/*.md; do
  name=$(basename "$f" .md)
  title=$(head -n1 "$f" | sed 's/^# //')
  printf '%s\t%s\n' "$title" "$name"
done | LC_ALL=C sort | while IFS=$'\t' read -r title name; do
  echo "<li><a href=\"$name.html\">$title</a></li>"
done
echo '</ul>'
echo '</body></html>'
SH
chmod +x tools/index.sh
python3 - <<'PY'
s = open("Makefile").read()
s = s.replace("build: $(PAGES) build/assets/style.css\n", "build: $(PAGES) build/assets/style.css build/index.html\n")
s += "\nbuild/index.html: $(wildcard src/pages/*.md) tools/index.sh\n\t@mkdir -p build\n\tbash tools/index.sh > $@\n"
open("Makefile", "w").write(s)
PY
make build
