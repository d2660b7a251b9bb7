python3 -B -m pytest -q -p no:cacheprovider tests
