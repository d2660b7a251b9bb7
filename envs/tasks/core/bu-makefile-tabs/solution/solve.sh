#!/usr/bin/env bash
set -euo pipefail
sed -i 's/^    /\t/' Makefile && make -s
