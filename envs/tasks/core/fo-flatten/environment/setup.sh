#!/usr/bin/env bash
set -euo pipefail
mkdir -p nested/x/y nested/z nested/q/r/s
echo one > nested/one.txt
echo two > nested/x/two.txt
echo three > nested/x/y/three.md
echo four > nested/z/four.csv
echo five > nested/q/r/s/five.txt
