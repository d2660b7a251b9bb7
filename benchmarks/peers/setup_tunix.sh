#!/usr/bin/env bash
# Creates a venv holding google-tunix 0.1.7 (the peer we measure against) apart from
# our own environment, so its pinned jax/flax never touch ours. Idempotent: a venv whose
# import check passes is reused. Sources come from the machine's own pip config.
set -euo pipefail
root="${AGENTRL_CACHE:-/tmp}/tunix-venv"
py="$root/bin/python"
if [[ -x "$py" ]] && "$py" -c "import tunix, jax, flax" 2>/dev/null; then
  echo "$py"
  exit 0
fi
python3 -m venv "$root"
"$py" -m pip install -q --upgrade pip >&2
"$py" -m pip install -q "google-tunix==0.1.7" >&2
"$py" -c "import tunix, jax, flax" >&2
echo "$py"
