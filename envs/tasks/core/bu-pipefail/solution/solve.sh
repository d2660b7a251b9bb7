#!/usr/bin/env bash
set -euo pipefail
cat > pipeline.sh <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
grep -v '^#' "$1" | sort | uniq > out.txt
echo "done"
EOF
