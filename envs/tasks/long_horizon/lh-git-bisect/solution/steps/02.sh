mkdir -p notes
{ git -C repo rev-parse main; if (cd repo && ./check.sh) >/dev/null 2>&1; then echo pass; else echo fail; fi; } > notes/head.txt
