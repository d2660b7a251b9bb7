#!/usr/bin/env bash
set -euo pipefail
mkdir -p data/a/x data/b data/c/y/z data/d data/e
head -c 3000 /dev/zero > data/a/x/f1; head -c 500 /dev/zero > data/a/f2
head -c 5000 /dev/zero > data/b/f
head -c 100 /dev/zero > data/c/y/z/f; head -c 4200 /dev/zero > data/c/g
head -c 10 /dev/zero > data/d/f
head -c 3600 /dev/zero > data/e/f
head -c 99999 /dev/zero > data/loose_file
