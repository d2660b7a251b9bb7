printf '\n.PHONY: clean\nclean:\n\trm -rf build dist\n' >> Makefile
