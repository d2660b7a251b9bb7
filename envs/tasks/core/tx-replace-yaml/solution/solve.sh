#!/usr/bin/env bash
set -euo pipefail
find config -name '*.yaml' -type f -exec sed -i 's/foo_service/bar_service/g' {} +
