#!/usr/bin/env bash
set -euo pipefail
cat > children.sh <<'EOF'
#!/usr/bin/env bash
[ -d "/proc/$1" ] || exit 1
n=0
for s in /proc/[0-9]*/stat; do
  ppid=$(sed 's/.*) //' "$s" 2>/dev/null | cut -d' ' -f2) || continue
  [ "$ppid" = "$1" ] && n=$((n + 1))
done
echo "$n"
EOF
chmod +x children.sh
