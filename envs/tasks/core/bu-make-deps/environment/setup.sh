#!/usr/bin/env bash
set -euo pipefail
mkdir -p pages
printf '# Home\n' > pages/a.md; printf '# About\n' > pages/b.md
printf '<html>{{BODY}}</html>\n' > template.html
cat > Makefile <<'EOF'
site/index.html: pages/a.md
	mkdir -p site
	cat $(sort $(wildcard pages/*.md)) > site/body.txt
	sed -e '/{{BODY}}/{r site/body.txt' -e 'd}' template.html > $@
EOF
