"""Fused paged-attention decode (attention="paged_ffi") vs the gather path, same run.

Two levels, each a ratio gather time / kernel time of interleaved repeats (medians):
  op      the attention of one decode step at the real model's shapes (SmolLM2-135M: 30
          layers, 9 query heads, 3 KV heads, head_dim 64, pages of 16): per layer, the gather
          of every slot's pages + engine_steps.decode_attend, vs paged_attention.decode_attend;
          --slots x --contexts, slot lengths drawn in (context/2, context], so the page bucket
          covers `context` as the engine's does
  engine  one full jitted decode step of an Engine on the real weights (--engine_slots x
          --engine_contexts), both engines stepping one shared state (random K/V in every page:
          a step's time does not depend on the values; slot lengths in (context/2, context]
          through the last step); the real model loads in seconds
The kernel must be built (python -m launch.build_native). Prints `uptime` before and after.

  python benchmarks/paged_decode.py [--repeats 7] [--threads 1,2] [--kv_dtypes float32,bfloat16,int8]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere

L, H, K, D, PAGE = 30, 9, 3, 64, 16  # SmolLM2-135M's attention shapes


def ints(s: str) -> list[int]:
  return [int(x) for x in s.split(",") if x]


def interleaved(fns: dict, repeats: int) -> tuple[dict[str, float], dict[str, float]]:
  """Median wall and CPU (this process's, all threads) seconds of each zero-argument fn
  (already compiled), called in turn `repeats` times. On a loaded machine the CPU time says
  what the work costs, the wall time what a caller waits."""
  import jax

  wall, cpu = {name: [] for name in fns}, {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      t, c = time.perf_counter(), time.process_time()
      jax.block_until_ready(fn())
      wall[name].append(time.perf_counter() - t)
      cpu[name].append(time.process_time() - c)
  med = lambda d: {name: statistics.median(ts) for name, ts in d.items()}
  return med(wall), med(cpu)


def random_cache(key, n_layers, num_pages, kv_dtype):
  """A cache whose every page holds random K/V (int8: random values and scales)."""
  import jax
  import jax.numpy as jnp

  from models.inference import kv_cache as kvc

  shape = (n_layers, num_pages, PAGE, K, D)
  kk, kv, ks, vs = jax.random.split(key, 4)
  if kv_dtype == "int8":
    q = lambda k: jax.random.randint(k, shape, -127, 128, jnp.int8)
    s = lambda k: jax.random.uniform(k, shape[:-1], jnp.float32, 0.005, 0.02)
    return kvc.KVCache(q(kk), q(kv), s(ks), s(vs))
  r = lambda k: jax.random.normal(k, shape, jnp.float32).astype(kv_dtype)
  return kvc.KVCache(r(kk), r(kv), None, None)


def op_level(args, report):
  import functools

  import jax
  import jax.numpy as jnp
  import numpy as np

  from models.inference import engine_steps, kv_evict
  from models.inference import kv_cache as kvc
  from models.inference import paged_attention as pa

  def chained(attend_layer, q_LSHd):
    """Layer l's query depends on layer l-1's output, as in a decode step: one layer's
    attention runs at a time (independent layers let XLA hold all 30 gathers at once)."""
    outs, prev = [], jnp.zeros(q_LSHd.shape[1:], q_LSHd.dtype)
    for layer in range(L):
      prev = attend_layer(q_LSHd[layer] + 1e-3 * prev, layer)[:, 0]
      outs.append(prev)
    return jnp.stack(outs)

  def gather_step(q_LSHd, cache, table_SM, k_pos_SN, pos_S):
    def attend_layer(q_SHd, layer):
      kc, vc = kvc.gather(cache, layer, table_SM, dtype=q_SHd.dtype)
      return engine_steps.decode_attend(q_SHd, kc, vc, k_pos_SN, pos_S)

    return chained(attend_layer, q_LSHd)

  def kernel_step(q_LSHd, cache, table_SM, k_pos_SN, pos_S, threads):
    def attend_layer(q_SHd, layer):
      return pa.decode_attend(q_SHd, cache, layer, table_SM, k_pos_SN, pos_S, threads=threads)

    return chained(attend_layer, q_LSHd)

  rng = np.random.default_rng(0)
  for kv_dtype in args.kv_dtypes:
    for S in args.slots:
      for ctx in args.contexts:
        M = ctx // PAGE
        cache = random_cache(jax.random.key(S * ctx), L, S * M + 1, kv_dtype)
        table_SM = jnp.asarray(1 + rng.permutation(S * M).reshape(S, M), jnp.int32)
        pos_S = jnp.asarray(rng.integers(ctx // 2, ctx, S), jnp.int32)
        k_pos_SN = kv_evict.key_positions(pos_S, M, PAGE, None)
        q = jnp.asarray(rng.normal(size=(L, S, H, D)), jnp.float32)
        ops = (q, cache, table_SM, k_pos_SN, pos_S)
        fns = {"gather": functools.partial(jax.jit(gather_step), *ops)}
        for t in args.threads:
          f = jax.jit(functools.partial(kernel_step, threads=t))
          fns[f"ffi_t{t}"] = functools.partial(f, *ops)
        ref = fns["gather"]()
        for name, fn in fns.items():  # compile, and check the kernel answers the same
          err = float(jnp.max(jnp.abs(fn() - ref)))
          assert err < 1e-4, f"{name} differs from gather by {err}"
        med, cpu = interleaved(fns, args.repeats)
        row = {n: med["gather"] / med[n] for n in fns if n != "gather"}
        cpu_row = {n: cpu["gather"] / cpu[n] for n in fns if n != "gather"}
        report[f"op/{kv_dtype}/s{S}/ctx{ctx}"] = dict(
          ms={n: 1e3 * t for n, t in med.items()}, ratio=row, cpu_ratio=cpu_row
        )
        times = ", ".join(f"{n} {1e3 * t:.2f}" for n, t in med.items())
        ratios = ", ".join(f"{n} {r:.2f}x (CPU {cpu_row[n]:.2f}x)" for n, r in row.items())
        print(f"op {kv_dtype:>8} S={S:>2} ctx={ctx:>4}: ms per step (30 layers) {times}; "
              f"gather/kernel {ratios}", flush=True)  # fmt: skip


def engine_level(args, report):
  import dataclasses

  import jax
  import jax.numpy as jnp
  import numpy as np

  from models.inference import paged_attention as pa
  from models.inference.engine import Engine
  from models.io import checkpoints, hf

  if args.engine_threads is not None:
    pa.THREADS = args.engine_threads  # read when the decode step is traced
  t0 = time.perf_counter()
  cfg, params = hf.load(checkpoints.resolve("smollm2-135m-instruct"))
  print(f"real model loaded in {time.perf_counter() - t0:.1f} s", flush=True)
  new = 2 * (args.repeats + 1)  # steps taken: lengths grow by one each, staying <= context
  for S in args.engine_slots:
    for ctx in args.engine_contexts:
      engines = {a: Engine(cfg, params, max_concurrent_decodes=S, max_seq_len=ctx + new,
                           attention=a) for a in ("gather", "paged_ffi")}  # fmt: skip
      assert engines["paged_ffi"].attention == "paged_ffi", "the kernel is not built"
      eng = engines["gather"]
      state = eng.init_decode_state()
      M = eng.pages_per_slot
      rows = jnp.asarray(1 + np.arange(S * M).reshape(S, M), jnp.int32)
      lengths = np.random.default_rng(S).integers(ctx // 2, ctx - new, S)
      lengths = jnp.asarray(lengths, jnp.int32)
      cache = random_cache(jax.random.key(ctx), cfg.n_layers, eng.num_pages, eng.kv_dtype)
      box = [dataclasses.replace(state, cache=cache, page_table_SM=rows, lengths_S=lengths)]
      pages = eng.attention_pages(ctx)

      def step(e, box=box, pages=pages):
        box[0], out = e.generate(None, box[0], pages=pages)
        return out

      fns = {a: (lambda e=e: step(e)) for a, e in engines.items()}
      for fn in fns.values():
        jax.block_until_ready(fn())  # compile
      med, cpu = interleaved(fns, args.repeats)
      ratio, cpu_ratio = med["gather"] / med["paged_ffi"], cpu["gather"] / cpu["paged_ffi"]
      report[f"engine/s{S}/ctx{ctx}"] = dict(
        ms={n: 1e3 * t for n, t in med.items()}, ratio=ratio, cpu_ratio=cpu_ratio
      )
      print(f"engine step S={S:>2} ctx={ctx:>4}: gather {1e3 * med['gather']:.1f} ms, paged_ffi "
            f"{1e3 * med['paged_ffi']:.1f} ms; gather/kernel {ratio:.2f}x (CPU {cpu_ratio:.2f}x)",
            flush=True)  # fmt: skip
      del engines, eng, box, state, cache


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--repeats", type=int, default=7)
  ap.add_argument("--slots", type=ints, default=[1, 8, 32])
  ap.add_argument("--contexts", type=ints, default=[256, 512, 1024])
  ap.add_argument("--kv_dtypes", type=lambda s: s.split(","), default=["float32"])
  ap.add_argument("--threads", type=ints, default=[1], help="kernel worker threads to measure")
  ap.add_argument("--engine_slots", type=ints, default=[1, 8, 32])
  ap.add_argument("--engine_contexts", type=ints, default=[256, 1024])
  ap.add_argument("--engine_threads", type=int, default=None, help="kernel threads in the engine")
  ap.add_argument("--parts", default="op,engine")
  args = ap.parse_args()
  from models.inference import paged_attention as pa

  if why := pa.unavailable():
    sys.exit(f"paged_decode.py: {why}")
  print("start:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
  report = {}
  if "op" in args.parts:
    op_level(args, report)
  if "engine" in args.parts:
    engine_level(args, report)
  print("end:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
  return report


if __name__ == "__main__":
  main()
