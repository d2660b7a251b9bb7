cat > tools/checklinks.sh <<'SH'
#!/usr/bin/env bash
# Fails when an href in build/*.html points to a file missing from build/.
set -uo pipefail
bad=0
for page in build/*.html; do
  for href in $(grep -o 'href="[^"]*"' "$page" | sed 's/^href="//; s/"$//'); do
    if [ ! -e "build/$href" ]; then
      echo "$page: broken link $href" >&2
      bad=1
    fi
  done
done
exit $bad
SH
chmod +x tools/checklinks.sh
printf '\n.PHONY: check\ncheck: build\n\tbash tools/checklinks.sh\n' >> Makefile
make check
