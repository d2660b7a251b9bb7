"""Peers measured in the same run as our benchmarks (see tunix_bench.py, hf_generate.py)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
SHAPE_FIELDS = (
  "vocab_size d_model n_layers n_heads n_kv_heads head_dim d_ff rope_theta norm_eps tie_embeddings"
).split()


def shape_of(cfg) -> str:
  """Our ModelConfig's architecture fields as the JSON the peer scripts take."""
  return json.dumps({k: getattr(cfg, k) for k in SHAPE_FIELDS})


def _json_lines(cmd: list[str], timeout_s: float) -> list[dict]:
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=HERE)
  rows = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
  if proc.returncode != 0 or not rows:
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    raise RuntimeError(f"peer {cmd[1]} failed (exit {proc.returncode}): " + " | ".join(tail))
  return rows


def tunix_python() -> str:
  """The Tunix venv's python (created on first use by setup_tunix.sh)."""
  out = subprocess.run(
    ["bash", str(HERE / "setup_tunix.sh")], capture_output=True, text=True, check=True
  )
  return out.stdout.strip().splitlines()[-1]


def tunix(what: str, cfg, timeout_s: float = 3600, **flags) -> list[dict]:
  """Runs tunix_bench.py `what` in the Tunix venv on cfg's shapes; its JSON rows."""
  args = [f"--{k}={v}" for k, v in flags.items()]
  cmd = [tunix_python(), str(HERE / "tunix_bench.py"), what, f"--shape={shape_of(cfg)}", *args]
  return _json_lines(cmd, timeout_s)


def hf_generate(cfg, timeout_s: float = 3600, **flags) -> list[dict]:
  """transformers' generate (torch, CPU) on cfg's shapes, in a child of our own python."""
  args = [f"--{k}={v}" for k, v in flags.items()]
  cmd = [sys.executable, str(HERE / "hf_generate.py"), f"--shape={shape_of(cfg)}", *args]
  return _json_lines(cmd, timeout_s)


def load() -> list[float]:
  return [round(x, 1) for x in os.getloadavg()]
