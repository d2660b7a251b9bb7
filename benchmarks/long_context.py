"""Long context: peak memory and time per token of naive, chunked and ring attention.

One causal attention layer, forward + backward (d(sum(out * do)) / d(q, k, v)), fp32,
batch 1, 4 query heads on 2 kv heads (GQA), head_dim 64, at 4k, 8k, 16k and 32k tokens:
  naive    models.attention impl='naive': the full T x T score matrix (the baseline)
  chunked  models.attention impl='chunked': flash-style, one device, linear memory
  ring     parallel.ring_attention over 8 (fake CPU) devices on the `sequence` axis
Each configuration runs in its own subprocess so its memory is measured alone:
  peak RSS   the child's ru_maxrss (whole process: Python, JAX, compile and run)
  +RSS       peak RSS minus the RSS before compiling (inputs already allocated)
  XLA temp   the compiled program's temporary buffers (memory_analysis; all devices)
A configuration whose XLA temp exceeds --max_gib is not run: its planned size is the figure.
The last lines fit memory ~ T^p per implementation (p ~ 1 linear, p ~ 2 quadratic).
Run: python benchmarks/long_context.py [--seq_lens=4096,8192,16384,32768] [--json=out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import resource
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
IMPLS = ("naive", "chunked", "ring")
RING_DEVICES = 8


def _rss_kib() -> int:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def child(args) -> dict:
  """Builds, compiles and (if it fits) runs one configuration; returns its figures."""
  sys.path.insert(0, str(REPO))
  import jax
  import jax.numpy as jnp
  import numpy as np

  from models.attention import attend
  from parallel import ring_attention as ra
  from parallel.mesh import MeshConfig, make_mesh

  t, h, kh, d = args.seq_len, args.heads, args.kv_heads, args.head_dim
  rng = np.random.default_rng(0)
  q, do = (jnp.asarray(rng.standard_normal((1, t, h, d), np.float32)) for _ in range(2))
  k, v = (jnp.asarray(rng.standard_normal((1, t, kh, d), np.float32)) for _ in range(2))
  pos = jnp.arange(t, dtype=jnp.int32)[None]
  if args.impl == "ring":
    mesh = make_mesh(MeshConfig(sequence=RING_DEVICES, fsdp=1))
    # Inputs are random, so taking them as already in zig-zag order changes nothing.
    pos = jnp.asarray(ra.zigzag_indices(t, RING_DEVICES))[None]

    def layer(q, k, v):
      return ra.ring_attention(q, k, v, mesh=mesh, positions_BT=pos, chunk=args.chunk)
  else:

    def layer(q, k, v):
      return attend(q, k, v, q_pos_BT=pos, k_pos_BS=pos, impl=args.impl, chunk=args.chunk)

  step = jax.jit(jax.grad(lambda q, k, v: jnp.sum(layer(q, k, v) * do), (0, 1, 2)))
  jax.block_until_ready((q, k, v, do))
  rss_before = _rss_kib()
  compiled = step.lower(q, k, v).compile()
  mem = compiled.memory_analysis()
  n_dev = RING_DEVICES if args.impl == "ring" else 1  # memory_analysis is per device
  out = dict(impl=args.impl, seq_len=t, xla_temp_mib=mem.temp_size_in_bytes * n_dev / 2**20)
  if args.compile_only:
    return dict(out, status="compiled only")
  if out["xla_temp_mib"] > args.max_gib * 1024:
    return dict(out, status=f"not run: XLA plans {out['xla_temp_mib'] / 1024:.1f} GiB")
  jax.block_until_ready(compiled(q, k, v))  # warm-up
  times = []
  for _ in range(args.repeats):
    start = time.perf_counter()
    jax.block_until_ready(compiled(q, k, v))
    times.append(time.perf_counter() - start)
  return dict(
    out,
    status="ok",
    us_per_token=min(times) / t * 1e6,
    peak_rss_mib=_rss_kib() / 1024,
    rss_over_mib=(_rss_kib() - rss_before) / 1024,
  )


def run_one(impl: str, seq_len: int, args) -> dict:
  """Runs one configuration in a fresh process; its peak RSS comes from wait4."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = (
    f"--xla_force_host_platform_device_count={RING_DEVICES if impl == 'ring' else 1}"
  )
  cmd = [sys.executable, __file__, "--child", f"--impl={impl}", f"--seq_len={seq_len}"]
  cmd += [f"--{k}={getattr(args, k)}" for k in ("heads", "kv_heads", "head_dim", "chunk")]
  cmd += [f"--max_gib={args.max_gib}", f"--repeats={args.repeats}"]
  cmd += ["--compile_only"] if args.compile_only else []
  proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    stdout, stderr = proc.communicate(timeout=args.timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.communicate()
    return dict(impl=impl, seq_len=seq_len, status=f"timeout after {args.timeout}s")
  lines = [x for x in stdout.splitlines() if x.startswith("{")]
  if proc.returncode != 0 or not lines:
    why = "killed (out of memory?)" if proc.returncode in (-9, 137) else f"exit {proc.returncode}"
    return dict(impl=impl, seq_len=seq_len, status=why, error=stderr[-2000:])
  return json.loads(lines[-1])


def slope(rows: list[dict], key: str) -> float | None:
  """Least-squares exponent p of key ~ T^p over the rows that ran."""
  pts = [(math.log(r["seq_len"]), math.log(r[key])) for r in rows if r.get(key, 0) > 0]
  if len(pts) < 2:
    return None
  mx = sum(x for x, _ in pts) / len(pts)
  my = sum(y for _, y in pts) / len(pts)
  return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def fmt(x, spec=".1f"):
  return "-" if x is None else format(x, spec)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--seq_lens", default="4096,8192,16384,32768")
  p.add_argument("--impls", default=",".join(IMPLS))
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--kv_heads", type=int, default=2)
  p.add_argument("--head_dim", type=int, default=64)
  p.add_argument("--chunk", type=int, default=512)
  p.add_argument("--repeats", type=int, default=1)
  p.add_argument("--max_gib", type=float, default=8.0, help="skip configs XLA plans above this")
  p.add_argument("--timeout", type=int, default=1800, help="seconds per configuration")
  p.add_argument("--compile_only", action="store_true", help="XLA figures only, no runs")
  p.add_argument("--json", default="", help="also write the rows to this file")
  p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--impl", default="chunked", help=argparse.SUPPRESS)
  p.add_argument("--seq_len", type=int, default=4096, help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.child:
    print(json.dumps(child(args)), flush=True)
    return

  print(
    f"causal attention fwd+bwd, fp32, B=1 H={args.heads} K={args.kv_heads} d={args.head_dim}, "
    f"chunk {args.chunk}; ring on {RING_DEVICES} fake CPU devices; {os.cpu_count()} CPUs"
  )
  header = (
    f"{'impl':8} {'T':>6} {'us/token':>9} {'peak RSS':>9} {'+RSS':>8} {'XLA temp':>9}  status"
  )
  print(header + "\n" + "-" * len(header))
  rows = []
  for impl in args.impls.split(","):
    for t in (int(x) for x in args.seq_lens.split(",")):
      r = run_one(impl, t, args)
      rows.append(r)
      print(
        f"{impl:8} {t:>6} {fmt(r.get('us_per_token')):>9} {fmt(r.get('peak_rss_mib'), '.0f'):>8}M "
        f"{fmt(r.get('rss_over_mib'), '.0f'):>7}M {fmt(r.get('xla_temp_mib'), '.0f'):>8}M  "
        f"{r['status']}",
        flush=True,
      )
  print("\nmemory growth, fitted exponent p of memory ~ T^p (1 = linear, 2 = quadratic):")
  for impl in args.impls.split(","):
    mine = [r for r in rows if r["impl"] == impl and "xla_temp_mib" in r]
    ran = [r for r in mine if r["status"] == "ok"]
    print(
      f"  {impl:8} +RSS p={fmt(slope(ran, 'rss_over_mib'), '.2f')}  "
      f"XLA temp p={fmt(slope(mine, 'xla_temp_mib'), '.2f')}  ({len(ran)}/{len(mine)} ran)"
    )
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
  main()
