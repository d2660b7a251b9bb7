r"""transformers' `generate` (PyTorch, CPU) on our toy shapes: the engine rows' second peer.

  python benchmarks/peers/hf_generate.py --shape=JSON [--concurrency=1,8,32] [--repeats=3]

A Qwen3ForCausalLM with random weights built from --shape (our ModelConfig's fields), fp32,
greedy, prompt 64 + exactly 128 new tokens (min_new_tokens = max_new_tokens), static batches
with the default dynamic KV cache. torch uses this machine's cores (its default threads).
Prints one JSON object per concurrency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch
import transformers


def build(shape: dict):
  cfg = transformers.Qwen3Config(
    vocab_size=shape["vocab_size"],
    hidden_size=shape["d_model"],
    intermediate_size=shape["d_ff"],
    num_hidden_layers=shape["n_layers"],
    num_attention_heads=shape["n_heads"],
    num_key_value_heads=shape["n_kv_heads"],
    head_dim=shape["head_dim"],
    rope_theta=shape["rope_theta"],
    rms_norm_eps=shape["norm_eps"],
    tie_word_embeddings=shape["tie_embeddings"],
    max_position_embeddings=2048,
  )
  torch.manual_seed(0)
  return transformers.Qwen3ForCausalLM(cfg).eval()


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--shape", required=True)
  ap.add_argument("--concurrency", default="1,8,32")
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--new", type=int, default=128)
  args = ap.parse_args()
  shape = json.loads(args.shape)
  model = build(shape)
  for c in [int(x) for x in args.concurrency.split(",") if x]:
    rng = np.random.default_rng(c)
    ids = torch.tensor(rng.integers(1, shape["vocab_size"], (c, args.prompt)))
    kw = dict(
      max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False, pad_token_id=0,
      attention_mask=torch.ones_like(ids),
    )  # fmt: skip
    with torch.inference_mode():
      model.generate(ids, **kw)  # warm-up
      times, cpus = [], []
      for _ in range(args.repeats):
        t, cpu = time.perf_counter(), time.process_time()
        out = model.generate(ids, **kw)
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - cpu)
    print(
      json.dumps(
        {
          "peer": "transformers",
          "what": "generate",
          "concurrency": c,
          "new_tokens": int(out.shape[1] - args.prompt),
          "tok_s": c * args.new / statistics.median(times),
          "median_s": statistics.median(times),
          "median_cpu_s": statistics.median(cpus),
          "torch_threads": torch.get_num_threads(),
          "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
          "load_average": os.getloadavg(),
        }
      ),
      flush=True,
    )


if __name__ == "__main__":
  main()
