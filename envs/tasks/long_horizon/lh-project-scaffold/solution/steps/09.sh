cat >> calcpkg/Makefile <<'MK'

VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' src/calc/__init__.py)

version:
	@echo $(VERSION)
MK
