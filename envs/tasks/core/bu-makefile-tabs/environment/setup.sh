#!/usr/bin/env bash
set -euo pipefail
mkdir -p src
printf 'alpha\nbeta\n' > src/a.txt; printf 'gamma\n' > src/b.txt
cat > Makefile <<'EOF'
out/report.txt: src/a.txt src/b.txt
    mkdir -p out
    cat src/a.txt src/b.txt | sort > $@
    wc -l < $@ >> $@
EOF
