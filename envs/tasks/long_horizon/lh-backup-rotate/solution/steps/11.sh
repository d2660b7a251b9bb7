chmod 444 backups/daily/*
