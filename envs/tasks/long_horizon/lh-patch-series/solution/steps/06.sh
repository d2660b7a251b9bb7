patch -p1 --dry-run < patches/0006-readme.patch >/dev/null
patch -p1 < patches/0006-readme.patch
echo "0006-readme.patch applied" >> applied.txt
