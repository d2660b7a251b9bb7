python3 - <<'PY'
s = open("Makefile").read()
s = s.replace("build: $(PAGES)\n", "build: $(PAGES) build/assets/style.css\n")
s += "\nbuild/assets/style.css: assets/style.css\n\t@mkdir -p build/assets\n\tcp $< $@\n"
open("Makefile", "w").write(s)
PY
make build
