#!/usr/bin/env bash
set -euo pipefail
echo 1.5.0 > VERSION
sed -i 's/^version = 1.4.2$/version = 1.5.0/' setup.cfg
sed -i 's/^__version__ = "1.4.2"$/__version__ = "1.5.0"/' src/app/__init__.py
