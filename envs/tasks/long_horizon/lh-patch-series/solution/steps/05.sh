patch -p1 --dry-run < patches/0005-discount.patch >/dev/null
patch -p1 < patches/0005-discount.patch
echo "0005-discount.patch applied" >> applied.txt
