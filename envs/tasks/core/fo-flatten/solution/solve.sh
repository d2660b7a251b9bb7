#!/usr/bin/env bash
set -euo pipefail
mkdir -p flat && find nested -type f -exec mv {} flat/ \; && rm -rf nested
