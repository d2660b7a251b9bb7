#!/usr/bin/env bash
set -euo pipefail
python3 - <<'EOF'
import re
vals = {}
for line in open("values.env"):
    line = line.rstrip("\n")
    if "=" in line:
        k, v = line.split("=", 1)
        vals[k] = v
text = open("template.txt").read()
open("out.txt", "w").write(re.sub(r"\{\{(\w+)\}\}", lambda m: vals.get(m.group(1), m.group(0)), text))
EOF
