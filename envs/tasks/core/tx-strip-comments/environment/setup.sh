#!/usr/bin/env bash
set -euo pipefail
printf '# main config\nport = 8080\n\n   # indented comment\nhost = 0.0.0.0  # trailing comment stays\n   \n\tname = app\n#\nurl = http://x/#anchor\n' > app.conf
