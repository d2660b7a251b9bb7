#!/usr/bin/env bash
set -euo pipefail
sed -n '10,20p' poem.txt > excerpt.txt
