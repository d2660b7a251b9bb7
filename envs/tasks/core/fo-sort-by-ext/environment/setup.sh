#!/usr/bin/env bash
set -euo pipefail
mkdir -p inbox
for f in report.PDF notes.txt todo.TXT photo.jpg Makefile data.tar.gz LICENSE song.mp3; do echo "$f" > "inbox/$f"; done
