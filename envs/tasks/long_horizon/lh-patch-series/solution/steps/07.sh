patch -p1 --dry-run < patches/0007-unknown-item.patch >/dev/null
patch -p1 < patches/0007-unknown-item.patch
echo "0007-unknown-item.patch applied" >> applied.txt
