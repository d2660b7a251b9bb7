#!/usr/bin/env bash
set -euo pipefail
sed -i 's/int(row\["amount"\]$/int(row["amount"])/' report.py
