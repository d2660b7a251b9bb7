"""XLA:CPU dot speed at the engine's decode shapes against the square-matmul peak, per XLA flag.

For each flag set (a child process each, since XLA reads XLA_FLAGS once) it prints GFLOP/s of
one jitted fp32 dot at the qwen3_20m decode shapes (32 slots: the MLP's up and down
projections and the LM head; 1 slot) and of a 2048^3 dot (the peak), best of 5 timed loops,
the decode shapes as a fraction of that peak measured in the same process, the time of the
whole decode step's matmul chain alone at 32 slots and at 1, and the memory bandwidth of a
pass over as many bytes as the weights (at 1 slot the step must read every weight once).

Run: python benchmarks/dot_speed.py [--flags=",--xla_cpu_use_xnnpack=true,--xla_cpu_use_onednn=true"]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

WEIGHTS = 4 * (2 * 512 * 512 + 2 * 512 * 128 + 3 * 512 * 2048) + 512 * 8192  # floats, 19.4M
SHAPES = [(32, 512, 1792), (32, 1792, 512), (32, 512, 8192), (1, 512, 1792), (2048, 2048, 2048)]


def measure() -> dict[str, float]:
  """GFLOP/s per shape in this process."""
  import jax  # noqa: PLC0415 (imported after XLA_FLAGS is set by the parent)
  import numpy as np  # noqa: PLC0415

  f = jax.jit(lambda a, b: a @ b)
  out = {}
  for m, k, n in SHAPES:
    rng = np.random.default_rng(0)
    a = jax.numpy.asarray(rng.random((m, k), np.float32))
    b = jax.numpy.asarray(rng.random((k, n), np.float32))
    best = _best_s(f, a, b, reps=20 if m == 2048 else 200)
    out[f"{m}x{k}x{n}"] = 2 * m * k * n / best / 1e9
  out["chain_ms"] = _chain_ms(jax, np, 32)
  out["chain1_ms"] = _chain_ms(jax, np, 1)
  out["stream_gbs"] = _stream_gbs(jax, np)
  return out


def _best_s(fn, *args, reps: int = 50) -> float:
  fn(*args).block_until_ready()
  best = float("inf")
  for _ in range(5):
    t = time.perf_counter()
    for _ in range(reps):
      r = fn(*args)
    r.block_until_ready()
    best = min(best, (time.perf_counter() - t) / reps)
  return best


def _stream_gbs(jax, np) -> float:
  """GB/s of one jitted sum over a buffer the size of those weights (77.6 MB: more than any
  cache here), so each pass reads it from memory: the bound of a step that reads every weight."""
  a = jax.numpy.asarray(np.random.default_rng(0).random(WEIGHTS, np.float32))
  return WEIGHTS * 4 / _best_s(jax.jit(lambda a: a.sum()), a) / 1e9


def _chain_ms(jax, np, slots: int) -> float:
  """ms of the decode step's matmuls alone at `slots` slots (benchmarks/generate.py's 4
  layers: q, k, v, o, gate, up, down, then the LM head; 38.8 MFLOP a slot, 77.6 MB of fp32
  weights read), each dot fed by the last."""
  rng = np.random.default_rng(0)
  dims = [(512, 512), (512, 128), (512, 128), (512, 512), (512, 2048), (512, 2048), (2048, 512)]
  ws = [jax.numpy.asarray(rng.random(d, np.float32) * 0.01) for _ in range(4) for d in dims]
  head = jax.numpy.asarray(rng.random((512, 8192), np.float32) * 0.01)

  @jax.jit
  def chain(x, ws, head):
    for i in range(0, len(ws), 7):
      q, k, v, o, g, u, d = ws[i : i + 7]
      a = (x @ q) + jax.numpy.tile(x @ k + x @ v, 4)
      x = x + a @ o
      x = x + ((x @ g) * (x @ u)) @ d
    return x @ head

  x = jax.numpy.asarray(rng.random((slots, 512), np.float32))
  return _best_s(chain, x, ws, head) * 1e3


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--flags", default=",--xla_cpu_use_xnnpack=true,--xla_cpu_use_onednn=true")
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.child:
    print(json.dumps(measure()))
    return
  print(f"load average {os.getloadavg()[0]:.2f}")
  for flag in args.flags.split(","):
    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    res = subprocess.run(
      [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True
    )
    g = json.loads(res.stdout.strip().splitlines()[-1])
    peak, chain_ms = g.pop("2048x2048x2048"), g.pop("chain_ms")
    chain1_ms, gbs = g.pop("chain1_ms"), g.pop("stream_gbs")
    row = ", ".join(f"{s} {v:.0f} ({v / peak:.2f})" for s, v in g.items())
    floor_ms = WEIGHTS * 4 / gbs / 1e6
    print(
      f"[{flag or 'default'}] peak {peak:.0f} GFLOP/s; {row}; decode matmul chain: 32 slots "
      f"{chain_ms:.2f} ms, 1 slot {chain1_ms:.2f} ms; memory {gbs:.1f} GB/s, so reading the "
      f"weights once takes {floor_ms:.2f} ms (1-slot chain at {floor_ms / chain1_ms:.2f} of it)"
    )
  print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
