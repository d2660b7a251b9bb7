#!/usr/bin/env bash
set -euo pipefail
patch -s -p1 < fix.patch && rm fix.patch
