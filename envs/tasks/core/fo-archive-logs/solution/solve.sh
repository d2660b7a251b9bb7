#!/usr/bin/env bash
set -euo pipefail
find logs -name '*.log' -type f | tar -czf logs.tar.gz -T -
