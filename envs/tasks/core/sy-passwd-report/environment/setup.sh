#!/usr/bin/env bash
set -euo pipefail
cat > passwd.txt <<'EOF'
root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
alice:x:1001:1001:Alice,,,:/home/alice:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/bin/bash
bob:x:1000:1000:Bob:/home/bob:/bin/bash
svc:x:999:999::/srv:/bin/bash
carol:x:1002:1002::/home/carol:/bin/zsh
dave:x:1500:1500::/home/dave:/bin/bash
eve:x:10000:10000::/home/eve:/bin/bash
EOF
