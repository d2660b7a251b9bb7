ln -sfn daily/data-2024-03-15.tar.gz backups/latest
