#!/usr/bin/env bash
set -euo pipefail
mkdir -p data/a/b data/c
head -c 500 /dev/zero > data/small.bin
head -c 1001 /dev/zero > data/big.bin
head -c 1000 /dev/zero > data/a/exact.bin
head -c 4096 /dev/zero > data/a/b/deep.bin
head -c 20 /dev/zero > data/c/tiny.bin
head -c 2000 /dev/zero > data/c/mid.bin
