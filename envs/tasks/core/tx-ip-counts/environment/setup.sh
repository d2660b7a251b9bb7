#!/usr/bin/env bash
set -euo pipefail
python3 - <<'EOF'
import random
r = random.Random(7)
ips = ["10.0.0.%d" % i for i in (1, 2, 3, 10, 11)] + ["192.168.1.5", "172.16.0.9"]
with open("access.log", "w") as f:
    for i in range(120):
        ip = r.choice(ips[: 3 + i % 5])
        f.write(f'{ip} - - [10/Oct/2023:13:{i % 60:02d}:00 +0000] "GET /p{i % 7} HTTP/1.1" 200 {r.randint(100, 900)}\n')
EOF
