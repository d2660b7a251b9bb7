#!/usr/bin/env bash
set -euo pipefail
awk -F: '$3 >= 1000 && $3 != 65534 && $7 == "/bin/bash" {print $3, $1}' passwd.txt | sort -n | awk '{print $2}' > users.txt
