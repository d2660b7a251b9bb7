#!/usr/bin/env bash
# Runs the reference solution's steps in order; the evaluation oracle runs them one turn each.
set -euo pipefail
SOLUTION_DIR="${SOLUTION_DIR:-$(cd "$(dirname "$0")" && pwd)}"
for step in "$SOLUTION_DIR"/steps/*.sh; do
  bash "$step"
done
