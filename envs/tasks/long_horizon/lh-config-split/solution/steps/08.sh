mkdir -p backup
tar -czf backup/config-orig.tar.gz config/app.ini
