cat >> calcpkg/Makefile <<'MK'

dist:
	rm -rf dist/calc-$(VERSION) && mkdir -p dist/calc-$(VERSION)
	cp -r LICENSE Makefile bin src tests dist/calc-$(VERSION)/
	find dist/calc-$(VERSION) -name __pycache__ -prune -exec rm -rf {} +
	tar -czf dist/calc-$(VERSION).tar.gz -C dist calc-$(VERSION)
	rm -rf dist/calc-$(VERSION)

.PHONY: test version dist
MK
make -s -C calcpkg dist
