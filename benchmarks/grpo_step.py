r"""Wall time of one full GRPO step: rollout + reference forward + update.

  python benchmarks/grpo_step.py [--repeats=3] [--plain]

8 prompts x G=4 samples, prompt 64 tokens, 128 new tokens (no early stop), KL to the
reference with beta=0.04 (k3), fp32, on `models.config.qwen3_20m()` (vocab 8192, width 512,
GQA 8/2). Rollout runs through the continuous-batching Generator (32 slots, paged KV cache);
the reference log-probs come from the jitted `compute_logprobs` on the reference params (only
at the loss tokens; they stay on the device); the update is the jitted, donated `train_step`
(PPO-clip, token-mean, AdamW). Both run each prompt once for its G rows and the LM head only
at the loss tokens (`rl.layout`; `--plain` turns both off for a baseline in the same run). Compilation is
excluded (one warm-up step); the median of `--repeats` steps is reported.
Reference (the closest JAX peer on this machine): 19 s (rollout 6.9, reference 2.5, update 10.2);
target <= 11 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import numpy as np

from models import config as mcfg
from models.engine import Engine
from models.generator import GenerationRequest, Generator
from models.sampling import SamplingParams
from parallel.mesh import MeshConfig, make_mesh
from rl import packing
from rl.config import LossConfig, OptimConfig, TrainConfig
from rl.train_state import create_train_state
from rl.train_step import make_compute_logprobs, make_train_step

P, G, PROMPT, NEW = 8, 4, 64, 128


def one_step(gen, state, step_fn, ref_fn, rng, seed):
  prompts = [rng.integers(0, 8192, PROMPT).tolist() for _ in range(P)]
  reqs = [
    GenerationRequest(p, NEW, SamplingParams(seed=seed * 1000 + i * G + j))  # G distinct samples
    for i, p in enumerate(prompts)
    for j in range(G)
  ]
  t0 = time.perf_counter()
  results = gen.generate(reqs)
  t1 = time.perf_counter()
  rewards = rng.random(P * G).round()  # a binary reward (the verifier is not what is timed)
  seqs = [
    {
      "tokens": q.prompt_tokens + r.tokens,
      "loss_mask": [0] * PROMPT + [1] * len(r.tokens),
      "behaviour_logprobs": [0.0] * PROMPT + list(r.logprobs),
      "reward": float(rw),
      "group_id": i // G,
    }
    for i, (q, r, rw) in enumerate(zip(reqs, results, rewards, strict=True))
  ]
  batch, _ = packing.pack(seqs, PROMPT + NEW, max_segments=1)
  c1 = time.process_time()
  ref = ref_fn(state.ref_params, batch)
  jax.block_until_ready(ref)
  t2, c2 = time.perf_counter(), time.process_time()
  batch["ref_logprobs_BT"] = ref  # a device array: no copy to the host and back
  state, metrics = step_fn(state, batch)
  jax.block_until_ready(metrics["loss"])
  t3, c3 = time.perf_counter(), time.process_time()
  gen.load_params(state.params, seed)
  return (
    state,
    step_fn.plan(batch),
    {
      "rollout_s": t1 - t0,
      "reference_s": t2 - t1,
      "update_s": t3 - t2,
      "total_s": t3 - t0,
      # CPU seconds of this process: less sensitive than wall time to other work on the machine.
      "reference_cpu_s": c2 - c1,
      "update_cpu_s": c3 - c2,
      "new_tokens": sum(len(r.tokens) for r in results),
    },
  )


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--plain", action="store_true", help="LM head everywhere, no shared prompts")
  args = ap.parse_args()
  cfg = mcfg.qwen3_20m()
  mesh = make_mesh(MeshConfig(fsdp=1), jax.devices()[:1])
  tc = TrainConfig(
    loss=LossConfig(kl="k3", kl_coef=0.04, compute_entropy=False),
    optim=OptimConfig(lr=1e-5),
    mesh=MeshConfig(fsdp=1),
    logit_buckets=0 if args.plain else 4,
    share_prefixes=not args.plain,
  )
  state, shardings = create_train_state(cfg, tc, mesh, jax.random.key(0))
  engine = Engine(
    cfg, jax.device_get(state.params), max_concurrent_decodes=P * G, max_seq_len=PROMPT + NEW
  )
  gen = Generator(engine)
  like = {
    k: np.zeros((P * G, PROMPT + NEW), np.int32)
    for k in ("tokens_BT", "positions_BT", "segment_ids_BT")
  }
  like.update(
    loss_mask_BT=np.zeros((P * G, PROMPT + NEW), np.float32),
    behaviour_logprobs_BT=np.zeros((P * G, PROMPT + NEW), np.float32),
    ref_logprobs_BT=np.zeros((P * G, PROMPT + NEW), np.float32),
    truncated_BS=np.zeros((P * G, 1), bool),
    rewards_BS=np.zeros((P * G, 1), np.float32),
    group_ids_BS=np.zeros((P * G, 1), np.int32),
  )
  step_fn = make_train_step(cfg, tc, mesh, shardings, like)
  ref_fn = make_compute_logprobs(cfg, tc, mesh, shardings.params, like, loss_only=not args.plain)
  rng = np.random.default_rng(0)
  t = time.perf_counter()
  state, _, _ = one_step(gen, state, step_fn, ref_fn, rng, 0)  # compiles everything
  compile_s = time.perf_counter() - t
  runs = []
  for i in range(args.repeats):
    state, layout, r = one_step(gen, state, step_fn, ref_fn, rng, i + 1)
    runs.append(r)
    print(json.dumps({k: round(v, 3) for k, v in r.items()}), flush=True)
  gen.close()
  med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
  print(
    json.dumps(
      {
        "benchmark": "grpo_step",
        "preset": "qwen3_20m",
        "prompts": P,
        "G": G,
        "prompt_len": PROMPT,
        "new_tokens": NEW,
        "plain": args.plain,
        "layout": layout._asdict(),  # the last step's rl.layout.Layout
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "first_step_with_compile_s": round(compile_s, 1),
        **{f"median_{k}": round(v, 3) for k, v in med.items()},
        "peer_total_s": 19.0,
        "target_total_s": 11.0,
      },
      indent=1,
    )
  )


if __name__ == "__main__":
  main()
