#!/usr/bin/env bash
set -euo pipefail
printf '#!/bin/sh\r\necho "tool ok"\r\n' > tool.sh
