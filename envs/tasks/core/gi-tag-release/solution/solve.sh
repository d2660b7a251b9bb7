#!/usr/bin/env bash
set -euo pipefail
cd repo
git tag -a v1.2.0 -m 'Version 1.2.0' "$(git log --format=%H --grep='^release 1.2$')"
