#!/usr/bin/env bash
set -euo pipefail
cd inbox
for f in *; do
  [ -f "$f" ] || continue
  case "$f" in
    *.*) ext=$(echo "${f##*.}" | tr 'A-Z' 'a-z') ;;
    *) ext=other ;;
  esac
  mkdir -p "$ext" && mv -- "$f" "$ext/"
done
