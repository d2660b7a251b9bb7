tar -tzf backups/daily/data-2024-03-15.tar.gz | grep -v '/$' | LC_ALL=C sort > backups/daily/data-2024-03-15.list
