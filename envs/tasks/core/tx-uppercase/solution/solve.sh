#!/usr/bin/env bash
set -euo pipefail
tr 'a-z' 'A-Z' < notes.txt > NOTES_UPPER.txt
