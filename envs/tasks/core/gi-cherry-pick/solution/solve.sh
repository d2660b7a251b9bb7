#!/usr/bin/env bash
set -euo pipefail
cd repo && git cherry-pick "$(git log hotfix --format=%H --grep='^fix: null check$')" >/dev/null
