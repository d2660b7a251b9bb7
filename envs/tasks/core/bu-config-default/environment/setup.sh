#!/usr/bin/env bash
set -euo pipefail
cat > run.sh <<'EOF'
#!/usr/bin/env bash
set -u
cfg="$CONFIG_PATH"
name=$(grep '^name=' "$cfg" | cut -d= -f2)
echo "running $name"
EOF
chmod +x run.sh
printf 'name=default-app\n' > config.ini
