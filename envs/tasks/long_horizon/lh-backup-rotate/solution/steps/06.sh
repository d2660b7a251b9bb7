cat > rotate.sh <<'SH'
#!/usr/bin/env bash
# rotate.sh DIR N: keep the N newest data-YYYY-MM-DD.tar.gz in DIR, delete older ones + companions.
set -euo pipefail
dir=$1; keep=$2
ls "$dir" | grep -E '^data-[0-9]{4}-[0-9]{2}-[0-9]{2}\.tar\.gz$' | LC_ALL=C sort -r | tail -n +$((keep + 1)) | while read -r a; do
  base=${a%.tar.gz}
  for f in "$a" "$base.sha256" "$base.list" "$base.changed"; do
    if [ -e "$dir/$f" ]; then rm -f "$dir/$f"; echo "deleted $f"; fi
  done
done | LC_ALL=C sort
SH
chmod +x rotate.sh
