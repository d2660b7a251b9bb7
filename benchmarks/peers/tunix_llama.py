r"""Tunix 0.1.7's Sampler on a real Llama-architecture HF folder (SmolLM2-135M-Instruct).

Runs inside the venv that benchmarks/peers/setup_tunix.sh makes (never in ours); loads the
folder's safetensors through Tunix's own Llama3 model and loader, fp32, and prints one JSON
object per concurrency on stdout (benchmarks/real_model.py reads them):

  python benchmarks/peers/tunix_llama.py --model HF_FOLDER --concurrency=1,32 --prompt 256 \
      --new 128

Prompts are random token ids (seeded; 1..vocab-1, Tunix treats 0 as padding), greedy, no early
stop. The greedy tokens of the first request are printed too, so the caller can check that
both sides run the same model.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

import jax
import numpy as np
from tunix.generate import sampler as sampler_lib
from tunix.models.llama3 import model as llama3
from tunix.models.llama3 import params as llama3_params
from tunix_bench import IdTokenizer  # beside this file


def model_config(hf: dict) -> llama3.ModelConfig:
  return llama3.ModelConfig(
    num_layers=hf["num_hidden_layers"],
    vocab_size=hf["vocab_size"],
    embed_dim=hf["hidden_size"],
    hidden_dim=hf["intermediate_size"],
    num_heads=hf["num_attention_heads"],
    head_dim=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
    num_kv_heads=hf["num_key_value_heads"],
    rope_theta=int(hf["rope_theta"]),
    norm_eps=hf["rms_norm_eps"],
    weight_tying=bool(hf.get("tie_word_embeddings")),
  )


def prompt_ids(vocab: int, n: int, length: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).integers(1, vocab, (n, length))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--model", required=True, help="HF folder (config.json, *.safetensors)")
  ap.add_argument("--concurrency", default="1,32")
  ap.add_argument("--repeats", type=int, default=1)
  ap.add_argument("--prompt", type=int, default=256)
  ap.add_argument("--new", type=int, default=128)
  args = ap.parse_args()
  jax.config.update("jax_platforms", "cpu")
  folder = pathlib.Path(args.model)
  hf = json.loads((folder / "config.json").read_text())
  cfg = model_config(hf)
  model = llama3_params.create_model_from_safe_tensors(str(folder), cfg, dtype=np.float32)
  cache = sampler_lib.CacheConfig(
    cache_size=args.prompt + args.new, num_layers=cfg.num_layers,
    num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
  )  # fmt: skip
  smp = sampler_lib.Sampler(model, IdTokenizer(), cache)
  for c in [int(x) for x in args.concurrency.split(",") if x]:
    ids = prompt_ids(cfg.vocab_size, c, args.prompt, c)
    batch = [" ".join(map(str, row)) for row in ids]
    run = lambda batch=batch: smp(  # noqa: E731
      batch, max_generation_steps=args.new, max_prompt_length=args.prompt, temperature=0.0
    )
    t = time.perf_counter()
    out = run()  # compiles
    first = time.perf_counter() - t
    times = []
    for _ in range(args.repeats):
      t = time.perf_counter()
      out = run()
      jax.block_until_ready(out.tokens)
      times.append(time.perf_counter() - t)
    row = dict(
      peer="tunix", what="sampler_llama", concurrency=c, first_call_s=first,
      tok_s=c * args.new / statistics.median(times), median_s=statistics.median(times),
      new_tokens=[len(t) for t in out.tokens], first_tokens=[int(t) for t in out.tokens[0]],
      prompt_seed=c, load_average=os.getloadavg(),
    )  # fmt: skip
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
  main()
