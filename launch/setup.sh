#!/usr/bin/env bash
# One-shot set-up for a fresh Debian-like machine: system packages (when root),
# Python packages, the Docker daemon and the sandbox task image. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRAS="${AGENTRL_EXTRAS:-all}"

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  need=()
  command -v bwrap >/dev/null || need+=(bubblewrap)
  command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v ip >/dev/null || need+=(iproute2)
  command -v newuidmap >/dev/null || need+=(uidmap)
  # the bwrap seccomp filter (libseccomp) and its static exec wrapper (built once with cc)
  [ -e /usr/lib/x86_64-linux-gnu/libseccomp.so.2 ] || ldconfig -p | grep -q libseccomp.so.2 || need+=(libseccomp2)
  command -v cc >/dev/null || need+=(gcc)
  [ -n "$(find /usr/lib -name libc.a -print -quit 2>/dev/null)" ] || need+=(libc6-dev)
  if [ "${#need[@]}" -gt 0 ]; then
    echo "[setup] apt-get install ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi

echo "[setup] pip install -e .[${EXTRAS}]"
python -m pip install -q -e ".[${EXTRAS}]"

# Start the Docker daemon if we can and it is not running (the docker backend needs it).
if command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then
    echo "[setup] starting dockerd"
    (nohup dockerd >/tmp/agentrl-dockerd.log 2>&1 &)
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  fi
fi

# Build (or reuse, by content hash) the sandbox task root filesystem.
if [ -f launch/build_image.py ]; then
  python -m launch.build_image
fi
echo "[setup] done"
