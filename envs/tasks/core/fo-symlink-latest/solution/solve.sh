#!/usr/bin/env bash
set -euo pipefail
latest=$(ls releases | sort -V | tail -n 1)
ln -sfn "releases/$latest" current
