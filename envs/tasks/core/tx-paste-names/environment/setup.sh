#!/usr/bin/env bash
set -euo pipefail
printf 'Ada\nAlan\nGrace\nEdsger\n' > first.txt
printf 'Lovelace\nTuring\nHopper\nDijkstra\n' > last.txt
