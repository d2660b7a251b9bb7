#!/usr/bin/env bash
set -euo pipefail
paste -d' ' first.txt last.txt > full.txt
