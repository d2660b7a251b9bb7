#!/usr/bin/env bash
set -euo pipefail
mkdir -p config/prod config/dev
printf 'name: foo_service\nurl: http://foo_service:80\nother: foo_services_old\n' > config/app.yaml
printf 'svc: foo_service\n' > config/prod/a.yaml
printf 'svc: foo_service\n' > config/dev/b.yml
printf 'foo_service\n' > config/README.md
