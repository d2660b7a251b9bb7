patch -p1 --dry-run < patches/0009-cli.patch >/dev/null
patch -p1 < patches/0009-cli.patch
echo "0009-cli.patch applied" >> applied.txt
