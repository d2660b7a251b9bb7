r"""Tunix 0.1.7 on our toy shapes: its Sampler, its GRPO learner on an RLCluster, its update.

Runs inside the venv that benchmarks/peers/setup_tunix.sh makes (never in ours), driven by
benchmarks/generate.py and grpo_step.py through peers.Peer: each key it reads on stdin runs
one measurement and prints a JSON row, so their runs and ours alternate (common.serve):

  echo 1 8 32 | python benchmarks/peers/tunix_bench.py sampler --concurrency=1,8,32 --shape=JSON
  echo step step | python benchmarks/peers/tunix_bench.py grpo --steps=1 --shape=JSON

--shape is our ModelConfig's fields (vocab_size, d_model, n_layers, n_heads, n_kv_heads,
head_dim, d_ff, rope_theta, norm_eps, tie_embeddings), so both sides build one architecture
(Qwen3: QK-norm, GQA, SwiGLU, RoPE) with random weights, fp32. Prompts are random token ids
(1..vocab-1; Tunix treats 0 as padding), greedy, no early stop (no token is an end token).
"""

from __future__ import annotations

import common
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
  fields = common.peer_fields(shape, "tunix")
  return qwen3.ModelConfig(**fields | {"rope_theta": int(fields["rope_theta"])})


def make_model(shape: dict, seed: int = 0):
  return qwen3.Qwen3(model_config(shape), rngs=nnx.Rngs(seed))


def prompts(shape, n, length, seed):
  """The peers' prompt ids (common.prompt_ids) as the text IdTokenizer reads."""
  return [
    " ".join(map(str, row)) for row in common.prompt_ids(shape["vocab_size"], n, length, seed)
  ]


def bench_sampler(args, shape):
  model = make_model(shape)
  cache = sampler_lib.CacheConfig(
    cache_size=args.prompt + args.new,
    num_layers=shape["n_layers"],
    num_kv_heads=shape["n_kv_heads"],
    head_dim=shape["head_dim"],
  )
  smp = sampler_lib.Sampler(model, IdTokenizer(), cache)

  def run(c):
    batch = prompts(shape, c, args.prompt, c)
    out, wall_s, cpu_s = common.timed_once(
      lambda: smp(batch, max_generation_steps=args.new, max_prompt_length=args.prompt,
                  temperature=0.0),
      block=lambda o: jax.block_until_ready(o.tokens),
    )  # fmt: skip
    return common.throughput_row(
      "tunix", "sampler", c, args.new, wall_s, cpu_s,
      new_tokens_per_request=[len(t) for t in out.tokens],
    )  # fmt: skip

  common.serve({str(c): lambda c=c: run(c) for c in common.concurrencies(args.concurrency)})


def main():
  ap = common.arg_parser(description=__doc__)
  ap.add_argument("what", choices=["sampler", "grpo"])
  ap.add_argument("--prompts", type=int, default=8, help="GRPO prompts per step")
  ap.add_argument("--G", type=int, default=4)
  ap.add_argument("--steps", type=int, default=3, help="GRPO steps after the warm-up one")
  ap.add_argument("--beta", type=float, default=0.04)
  args, shape = common.parse(ap)
  jax.config.update("jax_platforms", "cpu")
  if args.what == "sampler":
    bench_sampler(args, shape)
  else:
    from tunix_grpo import bench_grpo  # the GRPO half lives beside this file

    bench_grpo(args, shape, make_model, IdTokenizer, prompts)


if __name__ == "__main__":
  main()
