#!/usr/bin/env bash
set -euo pipefail
sed -i 's|^site/index.html: pages/a.md$|site/index.html: template.html $(wildcard pages/*.md)|' Makefile
