#!/usr/bin/env bash
set -euo pipefail
mkdir -p etc
printf 'port=80\nhost=a\n' > etc/web.conf
printf 'level=debug\n' > etc/log.conf
printf 'user=db\n' > etc/db.conf
printf 'not a conf\n' > etc/notes.txt
printf 'x=1\n' > etc/old.conf.bak
