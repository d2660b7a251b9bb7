#!/usr/bin/env bash
set -euo pipefail
for i in $(seq 1 40); do echo "line $i of the poem"; done > poem.txt
