#!/usr/bin/env bash
set -euo pipefail
cat > contacts.txt <<'EOF'
Reach Ann at ann.lee@example.com or ANN.LEE@example.com (same person).
Bob: bob_smith+work@mail.example.org; backup bob@example.net.
No address here: just text @ symbols and foo@ or @bar.
Carol <carol-99@sub.domain.io>, dave@x.co and again bob@example.net.
EOF
