#!/usr/bin/env bash
set -euo pipefail
sed -i 's|^cfg="$CONFIG_PATH"$|cfg="${CONFIG_PATH:-$(dirname "$0")/config.ini}"|' run.sh
