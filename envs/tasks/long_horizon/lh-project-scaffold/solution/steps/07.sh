printf "test:\n\tPYTHONPATH=src python3 -m pytest -q -p no:cacheprovider tests\n" > calcpkg/Makefile
