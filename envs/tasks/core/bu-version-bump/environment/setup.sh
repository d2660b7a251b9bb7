#!/usr/bin/env bash
set -euo pipefail
mkdir -p src/app
printf '1.4.2\n' > VERSION
printf '[metadata]\nname = app\nversion = 1.4.2\n\n[options]\ninstall_requires =\n    libfoo==1.4.2\n' > setup.cfg
printf '__version__ = "1.4.2"\nCOMPAT = "1.4.2"\n' > src/app/__init__.py
printf '# Changelog\n\n## 1.4.2\n- fixes\n' > CHANGELOG.md
