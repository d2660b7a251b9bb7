sed -i 's|^\ttar -czf dist/site.tar.gz -C build \.$|&\n\tcd dist \&\& sha256sum site.tar.gz > SHA256SUMS|' Makefile
make dist
