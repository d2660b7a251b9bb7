mkdir -p restore
tar -xzf backups/daily/data-2024-03-15.tar.gz -C restore
diff -r data restore/data && echo OK > restore/VERIFIED
