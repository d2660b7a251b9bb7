#!/usr/bin/env bash
set -euo pipefail
mkdir -p scripts
for f in build.sh deploy.sh test.sh; do printf '#!/bin/sh\necho %s\n' "$f" > "scripts/$f"; chmod 644 "scripts/$f"; done
printf 'data\n' > scripts/readme.txt; chmod 755 scripts/readme.txt
printf 'x\n' > scripts/config.ini; chmod 775 scripts/config.ini
printf 'k3y\n' > secret.key; chmod 664 secret.key
