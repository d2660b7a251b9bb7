#!/usr/bin/env bash
set -euo pipefail
jq 'group_by(.type) | map({(.[0].type): length}) | add' events.json > counts.json
