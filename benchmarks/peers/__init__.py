"""Peers measured in the same run as our benchmarks (see tunix_bench.py, hf_generate.py).

A peer runs in a child process kept alive beside ours (`Peer`): after its compiles, each
`run(key)` times one more measurement there, so a benchmark alternates its own runs with the
peer's and each ratio compares runs made seconds apart under the same machine load.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

from . import common

HERE = pathlib.Path(__file__).resolve().parent
SHAPE_FIELDS = tuple(common.FIELD_NAMES)  # what the peer scripts' --shape carries


def shape_of(cfg) -> str:
  """Our ModelConfig's architecture fields as the JSON the peer scripts take."""
  return json.dumps({k: getattr(cfg, k) for k in SHAPE_FIELDS})


class Peer:
  """One peer script in a child process (common.serve's protocol: a key in, a JSON row out)."""

  def __init__(self, cmd: list[str]):
    self.name = pathlib.Path(cmd[1]).name
    self._err = tempfile.TemporaryFile("w+")  # its logs; a pipe left unread could fill and block
    self._proc = subprocess.Popen(
      cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True, cwd=HERE
    )
    self.ready = self._row()

  def run(self, key) -> dict:
    """Times one measurement `key` in the peer; its row."""
    try:
      self._proc.stdin.write(f"{key}\n")
      self._proc.stdin.flush()
    except BrokenPipeError:
      pass  # it has exited: _row says why
    return self._row()

  def _row(self) -> dict:
    for line in self._proc.stdout:
      if line.startswith("{"):
        row = json.loads(line)
        if "error" in row:
          raise RuntimeError(f"peer {self.name}: {row['error']}")
        return row
    self._err.seek(0)
    tail = " | ".join(self._err.read().strip().splitlines()[-5:])
    raise RuntimeError(f"peer {self.name} exited (status {self._proc.wait()}): {tail}")

  def close(self) -> None:
    self._proc.stdin.close()
    self._proc.wait(timeout=600)
    self._err.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def tunix_python() -> str:
  """The Tunix venv's python (created on first use by setup_tunix.sh)."""
  out = subprocess.run(
    ["bash", str(HERE / "setup_tunix.sh")], capture_output=True, text=True, check=True
  )
  return out.stdout.strip().splitlines()[-1]


def _peer(python: str, script: str, what: list[str], cfg, flags) -> Peer:
  args = [f"--{k}={v}" for k, v in flags.items()]
  return Peer([python, str(HERE / script), *what, f"--shape={shape_of(cfg)}", *args])


def tunix(what: str, cfg, **flags) -> Peer:
  """tunix_bench.py `what` (sampler, grpo) in the Tunix venv on cfg's shapes, started."""
  return _peer(tunix_python(), "tunix_bench.py", [what], cfg, flags)


def hf_generate(cfg, **flags) -> Peer:
  """transformers' generate (torch, CPU) on cfg's shapes, in a child of our own python."""
  return _peer(sys.executable, "hf_generate.py", [], cfg, flags)


def load() -> list[float]:
  return [round(x, 1) for x in os.getloadavg()]
