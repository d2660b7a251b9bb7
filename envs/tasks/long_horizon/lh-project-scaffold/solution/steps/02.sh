printf '__version__ = "0.1.0"\n' > calcpkg/src/calc/__init__.py
