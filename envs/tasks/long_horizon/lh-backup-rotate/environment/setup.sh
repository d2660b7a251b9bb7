#!/usr/bin/env bash
set -euo pipefail
mkdir -p data/projects/alpha data/projects/beta data/notes backups/daily backups/monthly
old=$(mktemp -d)
mkdir -p "$old"/data/projects/alpha "$old"/data/projects/beta "$old"/data/notes
printf 'print("alpha v1")\n' > "$old"/data/projects/alpha/main.py
printf 'Alpha project.\n' > "$old"/data/projects/alpha/README
printf 'id,value\n1,10\n2,20\n' > "$old"/data/projects/beta/data.csv
printf -- '- buy milk\n' > "$old"/data/notes/todo.txt
printf 'obsolete\n' > "$old"/data/notes/old.txt
for d in 10 11 12 13 14; do
  tar -czf backups/daily/data-2024-03-$d.tar.gz -C "$old" data
  (cd backups/daily && sha256sum data-2024-03-$d.tar.gz > data-2024-03-$d.sha256)
done
tar -czf backups/monthly/data-2024-02-01.tar.gz -C "$old" data
rm -rf "$old"
printf 'print("alpha v2")\n' > data/projects/alpha/main.py
printf 'Alpha project.\n' > data/projects/alpha/README
printf 'id,value\n1,10\n2,20\n' > data/projects/beta/data.csv
printf 'new file\n' > data/projects/beta/new.txt
printf -- '- buy milk\n- call bob\n' > data/notes/todo.txt
