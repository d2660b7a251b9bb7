patch -p1 --dry-run < patches/0002-quantities.patch >/dev/null
patch -p1 < patches/0002-quantities.patch
echo "0002-quantities.patch applied" >> applied.txt
