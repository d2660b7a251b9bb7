#!/usr/bin/env bash
set -euo pipefail
mkdir -p project/src project/docs project/tests && : > project/README.md
