#!/usr/bin/env bash
set -euo pipefail
sed -i 's/\r$//' tool.sh && chmod +x tool.sh
