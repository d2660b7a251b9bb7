#!/usr/bin/env bash
set -euo pipefail
awk '!seen[$0]++' events.txt > unique.txt
