#!/usr/bin/env bash
set -euo pipefail
chmod u+x scripts/*.sh
chmod a-x scripts/readme.txt scripts/config.ini
chmod 600 secret.key
