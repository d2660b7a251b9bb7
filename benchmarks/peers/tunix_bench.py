r"""Tunix 0.1.7 on our toy shapes: its Sampler, its GRPO learner on an RLCluster, its update.

Runs inside the venv that benchmarks/peers/setup_tunix.sh makes (never in ours); prints one
JSON object per measurement on stdout, which benchmarks/generate.py and grpo_step.py read:

  python benchmarks/peers/tunix_bench.py sampler --concurrency=1,8,32 --repeats=3 --shape=JSON
  python benchmarks/peers/tunix_bench.py grpo --steps=3 --shape=JSON

--shape is our ModelConfig's fields (vocab_size, d_model, n_layers, n_heads, n_kv_heads,
head_dim, d_ff, rope_theta, norm_eps, tie_embeddings), so both sides build one architecture
(Qwen3: QK-norm, GQA, SwiGLU, RoPE) with random weights, fp32. Prompts are random token ids
(1..vocab-1; Tunix treats 0 as padding), greedy, no early stop (no token is an end token).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import numpy as np
from flax import nnx
from tunix.generate import sampler as sampler_lib
from tunix.models.qwen3 import model as qwen3


class IdTokenizer:
  """Token ids written as text ("12 7 301"): the benchmark feeds ids, not words."""

  def encode(self, text, **_):
    if not isinstance(text, str):  # the GRPO learner hands over 0-d numpy string arrays
      text = str(np.asarray(text).item())
    return [int(t) for t in text.split()]

  def decode(self, ids, **_):
    return " ".join(str(int(i)) for i in ids)

  def bos_id(self):
    return 0  # falsy: Tunix adds no BOS

  def eos_id(self):
    return -1  # no sampled token equals it: every request runs its full length

  def pad_id(self):
    return 0


def model_config(shape: dict) -> qwen3.ModelConfig:
  return qwen3.ModelConfig(
    num_layers=shape["n_layers"],
    vocab_size=shape["vocab_size"],
    embed_dim=shape["d_model"],
    hidden_dim=shape["d_ff"],
    num_heads=shape["n_heads"],
    head_dim=shape["head_dim"],
    num_kv_heads=shape["n_kv_heads"],
    rope_theta=int(shape["rope_theta"]),
    norm_eps=shape["norm_eps"],
    use_tied_embedding=shape["tie_embeddings"],
  )


def make_model(shape: dict, seed: int = 0):
  return qwen3.Qwen3(model_config(shape), rngs=nnx.Rngs(seed))


def prompts(shape, n, length, seed):
  rng = np.random.default_rng(seed)
  return [" ".join(map(str, rng.integers(1, shape["vocab_size"], length))) for _ in range(n)]


def bench_sampler(args, shape):
  model = make_model(shape)
  cache = sampler_lib.CacheConfig(
    cache_size=args.prompt + args.new,
    num_layers=shape["n_layers"],
    num_kv_heads=shape["n_kv_heads"],
    head_dim=shape["head_dim"],
  )
  smp = sampler_lib.Sampler(model, IdTokenizer(), cache)
  for c in [int(x) for x in args.concurrency.split(",") if x]:
    batch = prompts(shape, c, args.prompt, c)
    run = lambda batch=batch: smp(  # noqa: E731
      batch, max_generation_steps=args.new, max_prompt_length=args.prompt, temperature=0.0
    )
    out = run()  # compiles
    times, cpus = [], []
    for _ in range(args.repeats):
      t, cpu = time.perf_counter(), time.process_time()
      out = run()
      jax.block_until_ready(out.tokens)
      times.append(time.perf_counter() - t)
      cpus.append(time.process_time() - cpu)
    n_new = [len(t) for t in out.tokens]
    print(
      json.dumps(
        {
          "peer": "tunix",
          "what": "sampler",
          "concurrency": c,
          "new_tokens_per_request": n_new,
          "tok_s": c * args.new / statistics.median(times),
          "median_s": statistics.median(times),
          "median_cpu_s": statistics.median(cpus),
          "load_average": os.getloadavg(),
        }
      ),
      flush=True,
    )


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("what", choices=["sampler", "grpo"])
  ap.add_argument("--shape", required=True, help="our ModelConfig fields as JSON")
  ap.add_argument("--concurrency", default="1,8,32")
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--new", type=int, default=128)
  ap.add_argument("--prompts", type=int, default=8, help="GRPO prompts per step")
  ap.add_argument("--G", type=int, default=4)
  ap.add_argument("--steps", type=int, default=3, help="timed GRPO steps after one warm-up")
  ap.add_argument("--beta", type=float, default=0.04)
  args = ap.parse_args()
  shape = json.loads(args.shape)
  jax.config.update("jax_platforms", "cpu")
  if args.what == "sampler":
    bench_sampler(args, shape)
  else:
    from tunix_grpo import bench_grpo  # the GRPO half lives beside this file

    bench_grpo(args, shape, make_model, IdTokenizer, prompts)


if __name__ == "__main__":
  main()
