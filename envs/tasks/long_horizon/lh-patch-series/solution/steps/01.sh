patch -p1 --dry-run < patches/0001-add-banana.patch >/dev/null
patch -p1 < patches/0001-add-banana.patch
echo "0001-add-banana.patch applied" >> applied.txt
