patch -p1 --dry-run < patches/0010-selftest.patch >/dev/null
patch -p1 < patches/0010-selftest.patch
echo "0010-selftest.patch applied" >> applied.txt
