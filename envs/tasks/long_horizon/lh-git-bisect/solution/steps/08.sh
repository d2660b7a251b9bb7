(cd repo && ./check.sh) && echo pass > notes/after_fix.txt
