"""Generator end to end vs its `decode_chunk` (decode steps per host round trip), same run.

generate.py's model and requests (20M Qwen3 shapes, greedy, prompt 64, 128 new tokens); one
Generator per chunk size over one Engine, their runs interleaved (--repeats rounds), medians.
Each dispatch costs the host a wake-up and a read of the previous dispatch's tokens; on a
loaded machine a late wake-up leaves the device idle, which fewer, longer dispatches avoid.

  python benchmarks/decode_chunk.py [--concurrency=1,8,32] [--chunks=8,32,128] [--repeats=3]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from anywhere

import numpy as np
from generate import NEW, PROMPT, model  # benchmarks/generate.py (this folder)

from models.inference.engine import Engine
from models.inference.generator import GenerationRequest, Generator
from models.sampling import SamplingParams


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--concurrency", default="1,8,32")
  ap.add_argument("--chunks", default="8,32,128")
  ap.add_argument("--repeats", type=int, default=3)
  args = ap.parse_args()
  cfg, params = model()
  chunks = [int(x) for x in args.chunks.split(",")]
  for c in [int(x) for x in args.concurrency.split(",")]:
    prompts = np.random.default_rng(c).integers(0, cfg.vocab_size, (c, PROMPT))
    greedy = SamplingParams(greedy=True)
    reqs = [GenerationRequest(list(map(int, p)), NEW, greedy) for p in prompts]
    eng = Engine(cfg, params, max_concurrent_decodes=c, page_size=16, max_seq_len=PROMPT + NEW)
    gens = {k: Generator(eng, decode_chunk=k) for k in chunks}
    for g in gens.values():
      g.generate(reqs)  # compiles
    runs = {k: [] for k in chunks}
    for _ in range(args.repeats):
      for k, g in gens.items():
        t, cpu = time.perf_counter(), time.process_time()
        g.generate(reqs)
        runs[k].append((time.perf_counter() - t, time.process_time() - cpu))
    for g in gens.values():
      g.close()
    base = runs[chunks[0]]
    for k in chunks:
      print(json.dumps({
        "concurrency": c, "decode_chunk": k,
        "tok_s": round(c * NEW / statistics.median(w for w, _ in runs[k]), 1),
        f"speedup_vs_chunk{chunks[0]}": round(statistics.median(
          b[0] / r[0] for b, r in zip(base, runs[k], strict=True)), 3),
        f"cpu_vs_chunk{chunks[0]}": round(statistics.median(
          r[1] / b[1] for b, r in zip(base, runs[k], strict=True)), 3),
        "load_avg_1min": round(os.getloadavg()[0], 1),
      }), flush=True)  # fmt: skip


if __name__ == "__main__":
  main()
