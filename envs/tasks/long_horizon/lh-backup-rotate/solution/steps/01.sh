tar -czf backups/daily/data-2024-03-15.tar.gz data
