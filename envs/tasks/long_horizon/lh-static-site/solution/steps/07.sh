printf '\n.PHONY: dist\ndist: build\n\t@mkdir -p dist\n\ttar -czf dist/site.tar.gz -C build .\n' >> Makefile
make dist
