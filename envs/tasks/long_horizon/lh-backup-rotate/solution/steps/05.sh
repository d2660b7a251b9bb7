old=$(mktemp -d); new=$(mktemp -d)
tar -xzf backups/daily/data-2024-03-14.tar.gz -C "$old"
tar -xzf backups/daily/data-2024-03-15.tar.gz -C "$new"
{
  (cd "$old" && find data -type f) | while read -r p; do
    if [ ! -e "$new/$p" ]; then echo "D $p"; elif ! cmp -s "$old/$p" "$new/$p"; then echo "M $p"; fi
  done
  (cd "$new" && find data -type f) | while read -r p; do [ -e "$old/$p" ] || echo "A $p"; done
} | LC_ALL=C sort -k2,2 > backups/daily/data-2024-03-15.changed
rm -rf "$old" "$new"
