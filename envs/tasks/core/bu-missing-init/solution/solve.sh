#!/usr/bin/env bash
set -euo pipefail
touch tool/core/__init__.py && mv tool/core/normalise.py tool/core/normalize.py
