#!/usr/bin/env bash
set -euo pipefail
mkdir -p photos
printf 'AAA' > photos/b.jpg; printf 'AAA' > photos/a.jpg; printf 'AAA' > photos/c.jpg
printf 'BBB' > photos/z.png; printf 'BBB' > photos/m.png
printf 'CCC' > photos/solo.gif
printf 'DDD' > photos/d1.jpg; printf 'DDDD' > photos/d2.jpg
