#!/usr/bin/env bash
set -euo pipefail
cat > webapp.service <<'EOF'
[Unit]
Description=Demo web app
After=network.target

[Service]
ExecStart=/usr/bin/python3 -m http.server 8080
User=www-data
WorkingDirectory=/srv/webapp
Environment=APP_ENV=production
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
EOF
