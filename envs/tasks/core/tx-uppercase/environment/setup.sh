#!/usr/bin/env bash
set -euo pipefail
printf 'buy milk\ncall Alice at 5pm\nfix bug #42\n' > notes.txt
