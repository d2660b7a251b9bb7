cd backups/daily && for s in $(ls *.sha256 | LC_ALL=C sort); do sha256sum -c "$s"; done > ../verify.txt
