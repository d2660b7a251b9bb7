#!/usr/bin/env bash
set -euo pipefail
mkdir -p src && printf 'one\n' > src/b.txt && printf 'two\nthree\n' > src/a.txt
