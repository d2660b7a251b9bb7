#!/usr/bin/env bash
set -euo pipefail
cd repo && git commit -q --amend -m 'Fix typo in README'
