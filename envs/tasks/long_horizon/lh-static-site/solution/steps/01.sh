cat > Makefile <<'MK'
PAGES := $(patsubst src/pages/%.md,build/%.html,$(wildcard src/pages/*.md))

build: $(PAGES)

build/%.html: src/pages/%.md templates/page.html tools/render.py
	@mkdir -p build
	python3 tools/render.py $< templates/page.html $@
MK
