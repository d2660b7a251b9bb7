#!/usr/bin/env bash
set -euo pipefail
printf 'start\nload\nstart\nrun\nload\nstop\nrun\nstart\nexit\n' > events.txt
