#!/usr/bin/env bash
set -euo pipefail
for v in v1.2.0 v1.9.3 v1.10.0 v0.9.9 v1.10.0-rc1_unused; do mkdir -p "releases/$v"; echo "$v" > "releases/$v/VERSION"; done
rm -rf releases/v1.10.0-rc1_unused
