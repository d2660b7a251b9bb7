patch -p1 --dry-run < patches/0003-vat-docstring.patch >/dev/null
patch -p1 < patches/0003-vat-docstring.patch
echo "0003-vat-docstring.patch applied" >> applied.txt
