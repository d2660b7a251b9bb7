cd backups/daily && sha256sum data-2024-03-15.tar.gz > data-2024-03-15.sha256
