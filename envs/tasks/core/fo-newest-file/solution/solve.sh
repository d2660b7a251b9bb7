#!/usr/bin/env bash
set -euo pipefail
ls -t reports | head -n 1 > newest.txt
ls -tr reports | head -n 1 > oldest.txt
