#!/usr/bin/env bash
set -euo pipefail
cat > pipeline.sh <<'EOF'
#!/usr/bin/env bash
grep -v '^#' "$1" | sort | uniq > out.txt
echo "done"
EOF
chmod +x pipeline.sh
printf '# header\nb\na\nb\n' > in.txt
