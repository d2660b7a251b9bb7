#!/usr/bin/env bash
set -euo pipefail
git -C repo log --reverse --format=%H -G 'SECRET_TOKEN=' | sed -n 1p > answer.txt
