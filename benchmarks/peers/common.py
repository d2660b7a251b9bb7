"""What the peer scripts share: flags, prompts, timing, JSON rows.

Standard library and NumPy only: it is imported by hf_generate.py (our environment) and by
tunix_bench.py (Tunix's venv), each run as a script from this folder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
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


def timed_once(run, block=lambda out: out):
  """(output, wall s, process CPU s) of one call; block(out) waits for an asynchronous result."""
  t, cpu = time.perf_counter(), time.process_time()
  out = run()
  block(out)
  return out, time.perf_counter() - t, time.process_time() - cpu


def stdin_keys():
  """The whitespace-separated keys on stdin, one at a time, as they arrive."""
  for line in sys.stdin:
    yield from line.split()


def serve(runs: dict) -> None:
  """Interleaved measurement: runs every `runs[key]()` once (compiles), prints a ready row,
  then for each key on stdin prints the row one more call of runs[key]() returns.

  The caller (peers.Peer) sends a key right after timing its own run of the same work, so
  ours and the peer's runs alternate seconds apart and see the same machine load.
  """
  for run in runs.values():
    run()
  emit(ready=True, keys=sorted(runs))
  for key in stdin_keys():
    if key in runs:
      emit(**runs[key]())
    else:
      emit(error=f"unknown key {key!r} (known: {', '.join(sorted(runs))})")


def emit(**row) -> None:
  """One JSON row on stdout (what peers/__init__.py reads), with the load average."""
  print(json.dumps({**row, "load_average": os.getloadavg()}), flush=True)


def throughput_row(peer: str, what: str, c: int, new: int, wall_s: float, cpu_s: float, **extra):
  """A generation row: c requests of `new` tokens each in wall_s."""
  return dict(
    peer=peer, what=what, concurrency=c, tok_s=c * new / wall_s, wall_s=wall_s, cpu_s=cpu_s,
    **extra,
  )  # fmt: skip
