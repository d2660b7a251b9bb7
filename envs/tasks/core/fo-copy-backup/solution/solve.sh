#!/usr/bin/env bash
set -euo pipefail
mkdir -p backup && cp etc/*.conf backup/
