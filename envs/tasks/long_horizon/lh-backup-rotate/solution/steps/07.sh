bash rotate.sh backups/daily 3 > backups/retention.log
