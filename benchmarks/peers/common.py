"""What the peer scripts share: flags, prompts, timing, JSON rows.

Standard library and NumPy only: it is imported by hf_generate.py (our environment) and by
tunix_bench.py (Tunix's venv), each run as a script from this folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

# our ModelConfig field -> its name in (transformers' Qwen3Config, Tunix's qwen3.ModelConfig)
FIELD_NAMES = {
  "vocab_size": ("vocab_size", "vocab_size"),
  "d_model": ("hidden_size", "embed_dim"),
  "d_ff": ("intermediate_size", "hidden_dim"),
  "n_layers": ("num_hidden_layers", "num_layers"),
  "n_heads": ("num_attention_heads", "num_heads"),
  "n_kv_heads": ("num_key_value_heads", "num_kv_heads"),
  "head_dim": ("head_dim", "head_dim"),
  "rope_theta": ("rope_theta", "rope_theta"),
  "norm_eps": ("rms_norm_eps", "norm_eps"),
  "tie_embeddings": ("tie_word_embeddings", "use_tied_embedding"),
}


def peer_fields(shape: dict, peer: str) -> dict:
  """--shape (our field names) renamed for `peer` ("transformers" or "tunix")."""
  i = ("transformers", "tunix").index(peer)
  return {names[i]: shape[ours] for ours, names in FIELD_NAMES.items()}


def arg_parser(**kw) -> argparse.ArgumentParser:
  """The flags every peer script takes: the model shape and the generation workload."""
  ap = argparse.ArgumentParser(**kw)
  ap.add_argument("--shape", required=True, help="our ModelConfig fields as JSON")
  ap.add_argument("--concurrency", default="1,8,32")
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--new", type=int, default=128)
  return ap


def parse(ap: argparse.ArgumentParser) -> tuple[argparse.Namespace, dict]:
  """(flags, shape dict); a bad --shape is a one-line error."""
  args = ap.parse_args()
  try:
    shape = json.loads(args.shape)
  except json.JSONDecodeError as e:
    ap.error(f"--shape: not JSON ({e})")
  return args, shape


def concurrencies(text: str) -> list[int]:
  return [int(x) for x in text.split(",") if x]


def prompt_ids(vocab_size: int, n: int, length: int, seed: int) -> np.ndarray:
  """[n, length] random token ids in 1..vocab-1 (peers treat 0 as padding)."""
  return np.random.default_rng(seed).integers(1, vocab_size, (n, length))


def timed(run, repeats: int, block=lambda out: out):
  """(median wall s, median process CPU s, last output) of `repeats` calls after a warm-up.

  block(out) waits for an asynchronous result (a JAX array) before the clock stops.
  """
  block(run())  # warm-up: compiles, fills caches
  times, cpus, out = [], [], None
  for _ in range(repeats):
    t, cpu = time.perf_counter(), time.process_time()
    out = run()
    block(out)
    times.append(time.perf_counter() - t)
    cpus.append(time.process_time() - cpu)
  return statistics.median(times), statistics.median(cpus), out


def emit(**row) -> None:
  """One JSON row on stdout (what peers/__init__.py reads), with the load average."""
  print(json.dumps({**row, "load_average": os.getloadavg()}), flush=True)


def throughput_row(peer: str, what: str, c: int, new: int, wall_s: float, cpu_s: float, **extra):
  """Emits a generation row: c requests of `new` tokens each in wall_s (median)."""
  emit(
    peer=peer, what=what, concurrency=c, tok_s=c * new / wall_s, median_s=wall_s,
    median_cpu_s=cpu_s, **extra,
  )  # fmt: skip
