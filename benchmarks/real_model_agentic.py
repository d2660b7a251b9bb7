r"""One full agentic GRPO step on the real SmolLM2-135M-Instruct, timed part by part.

  python benchmarks/real_model_agentic.py [--tasks=8] [--group=4] [--turns=2]

8 procedural tasks (the five families of configs/smollm2.py, held-out seeds) x 4 samples,
at most 2 markdown-bash turns of 96 sampled tokens (few-shot prompt v2, temperature 1), each
episode in its own real bubblewrap sandbox and graded by the real verifier; then the
reference forward (jitted `compute_logprobs`, KL k3 on), the update (jitted, donated
`train_step`: AdamW, remat full, 4 micro-batches, fp32, shared prefixes and the loss-only
LM head as `rl.layout` plans them) and the weight sync (`Generator.load_params`). The rollout
part is wall time from the first request to the last graded episode (generation, tool
execution and grading overlap across episodes, so their per-episode means are printed
beside it). Compilation is timed apart: the reference forward's first call compiles its
layout and the second is timed; the update is compiled ahead (`lower().compile()`).
Prints one JSON line; benchmarks/RESULTS.md records it (no peer runs agentic steps on this
model, so these are absolute times on the machine the row names, not ratios).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import resource
import sys
import time
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from anywhere

import jax
import numpy as np

NAME = "smollm2-135m-instruct"
FAMILIES = ("echo_word", "sort_unique", "count_level", "rename_ext", "json_select")


def rollout(rep, tasks, group: int, seed: int):
  """Every task `group` times at once; (groups of episode rows, wall s, per-episode means)."""
  from rl.runtime.records import episode_row

  episodes = rep.episodes()
  jobs = [(g, s, t) for g, t in enumerate(tasks) for s in range(group)]
  t0 = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
    outs = list(pool.map(lambda j: episodes(j[2], f"g{j[0]}-s{j[1]}", seed + 97 * j[0] + j[1]),
                         jobs))  # fmt: skip
  wall = time.perf_counter() - t0
  rows = [episode_row(t, g, s, o) for (g, s, t), o in zip(jobs, outs, strict=True)]
  groups = [types.SimpleNamespace(rows=rows[i : i + group]) for i in range(0, len(rows), group)]
  mean = lambda k: float(np.mean([r[k] for r in rows]))
  parts = {k: mean(k) for k in ("gen_s", "env_s", "verify_s", "generated_tokens", "num_turns")}
  parts["pass_rate"] = mean("passed")
  parts["infra_errors"] = sum(r["infra_error"] is not None for r in rows)
  return groups, wall, parts


def timed(fn, *args):
  t = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  return out, time.perf_counter() - t


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--tasks", type=int, default=8)
  ap.add_argument("--group", type=int, default=4)
  ap.add_argument("--turns", type=int, default=2)
  ap.add_argument("--new_tokens", type=int, default=96)
  ap.add_argument("--row_len", type=int, default=1024)
  ap.add_argument("--micro_batches", type=int, default=4)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()

  from envs import procedural
  from envs.agents.agent import AgentConfig
  from models.io import hf
  from parallel.mesh import MeshConfig, make_mesh
  from rl.batch import build_batch, row_multiple
  from rl.config import EngineConfig, EnvConfig, LossConfig, OptimConfig, TrainConfig
  from rl.layout import plan
  from rl.runtime.replica import Replica
  from rl.train_state import create_train_state
  from rl.train_step import make_compute_logprobs, make_train_step

  cfg, params = hf.load(NAME)
  cfg = dataclasses.replace(cfg, remat="full")
  tok = hf.load_tokenizer(NAME)
  tasks = [
    procedural.generate(FAMILIES[i % len(FAMILIES)], EnvConfig().eval_seed + 1000 + i)
    for i in range(args.tasks)
  ]
  agent = AgentConfig(
    protocol="markdown_bash", max_turns=args.turns, max_new_tokens=args.new_tokens,
    max_episode_tokens=args.turns * args.new_tokens, max_context_tokens=args.row_len,
    temperature=1.0, greedy=False, exec_timeout_s=10.0, episode_timeout_s=600.0,
  )  # fmt: skip
  env = EnvConfig(backend="bwrap", system_prompt="markdown_bash_v2")
  slots = args.tasks * args.group
  rep = Replica(cfg, params, tok, EngineConfig(slots=slots, max_seq_len=args.row_len), env, agent)
  report = {"load_start": [round(x, 2) for x in os.getloadavg()]}
  try:
    groups, roll_s, parts = rollout(rep, tasks, args.group, args.seed)
    loss = LossConfig(kl="k3", kl_coef=0.04)
    tcfg = TrainConfig(
      loss=loss, micro_batches=args.micro_batches, mesh=MeshConfig(fsdp=-1),
      optim=OptimConfig(lr=1e-5, warmup_steps=0, decay_steps=1000),
    )  # fmt: skip
    mesh = make_mesh(tcfg.mesh)
    mult = row_multiple(mesh, tcfg.micro_batches)
    batch, n_seq = build_batch(groups, loss, args.row_len, 1, mult, tok.pad_id)
    state, shardings = create_train_state(cfg, tcfg, mesh, jax.random.key(0), params=params)
    ref_fn = make_compute_logprobs(cfg, tcfg, mesh, shardings.params, batch, loss_only=True)
    _, ref_first = timed(ref_fn, state.ref_params, batch)  # the first call compiles
    ref_lp, ref_s = timed(ref_fn, state.ref_params, batch)
    batch = dict(batch, ref_logprobs_BT=np.asarray(ref_lp))
    step = make_train_step(cfg, tcfg, mesh, shardings, batch)
    t = time.perf_counter()
    compiled = step.lower(state, batch).compile()  # this batch's layout, ahead of the call
    upd_compile = time.perf_counter() - t
    (state, m), upd_s = timed(compiled, state, batch)
    _, sync_s = timed(lambda p: rep.gen.load_params(p, version=1), state.params)
  finally:
    rep.close()
  total = roll_s + ref_s + upd_s + sync_s
  report.update(
    step_s=total, rollout_s=roll_s, reference_s=ref_s, update_s=upd_s, sync_s=sync_s,
    reference_first_s=ref_first, update_compile_s=upd_compile, episode_means=parts,
    batch_rows=int(batch["tokens_BT"].shape[0]), row_len=args.row_len, sequences=n_seq,
    layout=str(plan(batch, tcfg, cfg, batch["tokens_BT"].shape[0] // args.micro_batches)),
    loss=float(m["loss"]), peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    load_end=[round(x, 2) for x in os.getloadavg()],
  )  # fmt: skip
  share = {k: report[f"{k}_s"] / total for k in ("rollout", "reference", "update", "sync")}
  print(
    f"agentic GRPO step ({args.tasks} tasks x {args.group}, {args.turns} turns): "
    f"{total:.1f} s = rollout {roll_s:.1f} ({share['rollout']:.0%}; per episode: generation "
    f"{parts['gen_s']:.1f} s, tools {parts['env_s']:.1f} s, grading {parts['verify_s']:.1f} s) "
    f"+ reference {ref_s:.1f} + update {upd_s:.1f} + sync {sync_s:.2f}; reference first call "
    f"(compiling) {ref_first:.1f} s, update compile {upd_compile:.1f} s; pass rate "
    f"{parts['pass_rate']:.2f}",
    flush=True,
  )
  print(json.dumps(report))
  return 0 if parts["infra_errors"] == 0 else 1


if __name__ == "__main__":
  raise SystemExit(main())
