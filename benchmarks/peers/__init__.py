"""Peers measured in the same run as our benchmarks (see tunix_bench.py, hf_generate.py)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from . import common

HERE = pathlib.Path(__file__).resolve().parent
SHAPE_FIELDS = tuple(common.FIELD_NAMES)  # what the peer scripts' --shape carries


def shape_of(cfg) -> str:
  """Our ModelConfig's architecture fields as the JSON the peer scripts take."""
  return json.dumps({k: getattr(cfg, k) for k in SHAPE_FIELDS})


def _json_lines(cmd: list[str], timeout_s: float) -> list[dict]:
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=HERE)
  rows = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
  if proc.returncode != 0 or not rows:
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    raise RuntimeError(
      f"peer {pathlib.Path(cmd[1]).name} failed (exit {proc.returncode}): " + " | ".join(tail)
    )
  return rows


def tunix_python() -> str:
  """The Tunix venv's python (created on first use by setup_tunix.sh)."""
  out = subprocess.run(
    ["bash", str(HERE / "setup_tunix.sh")], capture_output=True, text=True, check=True
  )
  return out.stdout.strip().splitlines()[-1]


def _peer(python: str, script: str, what: list[str], cfg, timeout_s: float, flags) -> list[dict]:
  args = [f"--{k}={v}" for k, v in flags.items()]
  cmd = [python, str(HERE / script), *what, f"--shape={shape_of(cfg)}", *args]
  return _json_lines(cmd, timeout_s)


def tunix(what: str, cfg, timeout_s: float = 3600, **flags) -> list[dict]:
  """Runs tunix_bench.py `what` in the Tunix venv on cfg's shapes; its JSON rows."""
  return _peer(tunix_python(), "tunix_bench.py", [what], cfg, timeout_s, flags)


def hf_generate(cfg, timeout_s: float = 3600, **flags) -> list[dict]:
  """transformers' generate (torch, CPU) on cfg's shapes, in a child of our own python."""
  return _peer(sys.executable, "hf_generate.py", [], cfg, timeout_s, flags)


def load() -> list[float]:
  return [round(x, 1) for x in os.getloadavg()]
