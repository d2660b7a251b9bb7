python3 -B src/selftest.py > selftest.log
