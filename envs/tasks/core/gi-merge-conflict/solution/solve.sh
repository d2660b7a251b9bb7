#!/usr/bin/env bash
set -euo pipefail
cd repo
git merge -q feature -m "merge feature" || true
printf '[app]\nname = demo\ntimeout = 60\ncache = on\nlog_level = debug\n' > settings.ini
git add settings.ini
git -c core.editor=true commit -q --no-edit
