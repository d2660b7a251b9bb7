r"""Wall time of one full GRPO step: rollout + reference forward + update + weight sync.

  python benchmarks/grpo_step.py [--repeats=3] [--no_plain] [--peers=tunix]

8 prompts x G=4 samples, prompt 64 tokens, 128 new tokens (no early stop), KL to the
reference with beta=0.04 (k3), fp32, on `models.config.qwen3_20m()` (vocab 8192, width 512,
GQA 8/2). Rollout runs through the continuous-batching Generator (32 slots, paged KV cache);
the reference log-probs come from the jitted `compute_logprobs` on the reference params (only
at the loss tokens; they stay on the device); the update is the jitted, donated `train_step`
(PPO-clip, token-mean, AdamW). Both run each prompt once for its G rows and the LM head only
at the loss tokens (`rl.layout`); the `plain` baseline (both off: LM head everywhere, no shared
prompts) runs in the same invocation, its steps interleaved with ours. The step ends when the
engine serves the new weights (`load_params`, timed as `sync_s`). Compilation is excluded (two
warm-up steps each); medians of `--repeats` steps. `--peers=tunix` runs Tunix 0.1.7's GRPO
learner on an RLCluster on the same shapes and work (benchmarks/peers/tunix_grpo.py) in a
child process whose steps alternate with ours (one of its steps after each round of ours),
and prints peer step / our step (median of per-round ratios). Target: >= 1.75x Tunix's.
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

import jax
import numpy as np

from models import config as mcfg
from models.inference.engine import Engine
from models.inference.generator import GenerationRequest, Generator
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
  gen.load_params(state.params, seed)  # the weight sync: the next rollout runs the new policy
  # The engine's per-layer copy of the new weights is dispatched here and finishes inside the
  # next rollout (timed there): every step's total_s holds exactly one whole weight sync.
  jax.block_until_ready(gen.engine.params)
  t4 = time.perf_counter()
  return (
    state,
    step_fn.plan(batch),
    {
      "rollout_s": t1 - t0,
      "reference_s": t2 - t1,
      "update_s": t3 - t2,
      "sync_s": t4 - t3,
      "total_s": t4 - t0,
      # CPU seconds of this process: less sensitive than wall time to other work on the machine.
      "reference_cpu_s": c2 - c1,
      "update_cpu_s": c3 - c2,
      "new_tokens": sum(len(r.tokens) for r in results),
    },
  )


def build(cfg, plain: bool):
  """(generator, train state, step fn, reference fn) for our layout or the plain baseline."""
  mesh = make_mesh(MeshConfig(fsdp=1), jax.devices()[:1])
  tc = TrainConfig(
    loss=LossConfig(kl="k3", kl_coef=0.04, compute_entropy=False),
    optim=OptimConfig(lr=1e-5),
    mesh=MeshConfig(fsdp=1),
    logit_buckets=0 if plain else 4,
    share_prefixes=not plain,
  )
  state, shardings = create_train_state(cfg, tc, mesh, jax.random.key(0))
  engine = Engine(
    cfg, jax.device_get(state.params), max_concurrent_decodes=P * G, max_seq_len=PROMPT + NEW
  )
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
  ref_fn = make_compute_logprobs(cfg, tc, mesh, shardings.params, like, loss_only=not plain)
  return [Generator(engine), state, step_fn, ref_fn]


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--no_plain", action="store_true", help="skip the plain baseline")
  ap.add_argument("--peers", default="", help="tunix: its GRPO learner, same shapes and work")
  args = ap.parse_args()
  cfg = mcfg.qwen3_20m()
  tunix = None
  if "tunix" in args.peers.split(","):
    import peers  # benchmarks/peers (this script's folder is on sys.path)

    tunix = peers.tunix("grpo", cfg, steps=args.repeats, prompts=P, G=G, prompt=PROMPT, new=NEW)
  kinds = {"ours": build(cfg, False)}
  if not args.no_plain:
    kinds["plain"] = build(cfg, True)
  rng = np.random.default_rng(0)
  compile_s, runs, layout = {}, {k: [] for k in kinds}, {}
  for k, (gen, _, step_fn, ref_fn) in kinds.items():
    t = time.perf_counter()
    kinds[k][1], _, _ = one_step(gen, kinds[k][1], step_fn, ref_fn, rng, 0)  # compiles
    compile_s[k] = time.perf_counter() - t
    # a second untimed step: the first weight sync of device-resident params compiles the
    # engine's per-layer copy, which otherwise lands in the first timed rollout
    kinds[k][1], _, _ = one_step(gen, kinds[k][1], step_fn, ref_fn, rng, 1)
  if tunix is not None:
    compile_s["tunix"] = tunix.run("step")["total_s"]  # its first step compiles
    runs["tunix"] = []
  for i in range(args.repeats):  # interleaved: load drifts hit every kind alike
    for k, (gen, state, step_fn, ref_fn) in kinds.items():
      kinds[k][1], layout[k], r = one_step(gen, state, step_fn, ref_fn, rng, i + 2)
      runs[k].append(r)
      print(json.dumps({"kind": k, **{n: round(v, 3) for n, v in r.items()}}), flush=True)
    if tunix is not None:
      r = {n: v for n, v in tunix.run("step").items() if n.endswith("_s")}
      runs["tunix"].append(r)
      print(json.dumps({"kind": "tunix", **{n: round(v, 3) for n, v in r.items()}}), flush=True)
  for gen, *_ in kinds.values():
    gen.close()
  if tunix is not None:
    tunix.close()
  med = {k: {n: statistics.median(r[n] for r in v) for n in v[0]} for k, v in runs.items()}
  out = {
    "benchmark": "grpo_step",
    "preset": "qwen3_20m",
    "prompts": P,
    "G": G,
    "prompt_len": PROMPT,
    "new_tokens": NEW,
    "load_average": [round(x, 1) for x in os.getloadavg()],
    "first_step_with_compile_s": {k: round(v, 1) for k, v in compile_s.items()},
  }
  for k in runs:
    out[k] = {
      **({"layout": layout[k]._asdict()} if k in layout else {}),
      **{f"median_{n}": round(v, 3) for n, v in med[k].items()},
    }
  ours = runs["ours"]
  for k in ("plain", "tunix"):  # per-round ratios: each pair ran seconds apart
    if k in runs:
      ratio = statistics.median(
        b["total_s"] / a["total_s"] for a, b in zip(ours, runs[k], strict=True)
      )
      out[f"{k}_over_ours"] = round(ratio, 3)
  if tunix is not None:
    out["target_tunix_over_ours"] = 1.75
  print(json.dumps(out, indent=1))


if __name__ == "__main__":
  main()
