python3 - <<'PY'
s = open("Makefile").read()
s = s.replace("build: $(PAGES) build/assets/style.css build/index.html\n", "build: $(PAGES) build/assets/style.css build/index.html build/sitemap.txt\n")
s += "\nbuild/sitemap.txt: $(PAGES) build/index.html\n\tcd build && find . -name '*.html' | sed 's|^\\./||' | LC_ALL=C sort > sitemap.txt\n"
open("Makefile", "w").write(s)
PY
make build
