#!/usr/bin/env bash
set -euo pipefail
cat > Makefile <<'EOF'
SRC := $(sort $(wildcard src/*.txt))

build: build/all.txt build/count.txt

build/all.txt: $(SRC)
	mkdir -p build
	cat $(SRC) > $@

build/count.txt: build/all.txt
	wc -l < $< | tr -d ' ' > $@

clean:
	rm -rf build

.PHONY: build clean
EOF
