r"""One full agentic GRPO step on the real SmolLM2-135M-Instruct, timed part by part.

  python benchmarks/real_model_agentic.py [--tasks=8] [--group=4] [--turns=2] [--steps=2]
  python benchmarks/real_model_agentic.py --baseline=61cce1b --repeats=2 [shape flags]

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
`--steps=N` runs N steps in one process (sampling, update, weight sync, again) and reports
the last: the first step's rollout also compiles the engine's prefill buckets.
Prints one JSON line per run.

`--baseline=REV` checks REV out (`git worktree add` in a temp dir) and runs this same step,
this script's code, in two subprocesses per repeat: one with REV's tree first on PYTHONPATH,
one with this tree, alternating which goes first, so both see the same machine load. It
prints each run's line and then the same-run ratio (REV's step time over this tree's, median
over the repeats) and both trees' episodes per hour. benchmarks/RESULTS.md records them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import inspect
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types

# Run from anywhere; --_root=TREE (a baseline child) imports the project from TREE instead.
sys.path.insert(0, next((a[8:] for a in sys.argv if a.startswith("--_root=")), str(pathlib.Path(__file__).resolve().parents[1])))  # fmt: skip

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
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


def imports():
  """The project's modules by name, at this tree's paths or (a baseline) the older ones."""
  import importlib

  def first(*names):
    for n in names:
      try:
        return importlib.import_module(n)
      except ModuleNotFoundError:
        continue
    raise ModuleNotFoundError(names[-1])

  return types.SimpleNamespace(
    procedural=first("envs.procedural"), agent=first("envs.agents.agent", "envs.agent"),
    hf=first("models.io.hf", "models.hf"), mesh=first("parallel.mesh"), batch=first("rl.batch"),
    config=first("rl.config"), layout=first("rl.layout"), replica=first("rl.runtime.replica"),
    train_state=first("rl.train_state"), train_step=first("rl.train_step"),
  )  # fmt: skip


def update(m, cfg, tcfg, mesh, state, shardings, groups, args, tok):
  """Reference forward + jitted update + their compile times on this step's batch."""
  loss = tcfg.loss
  mult = m.batch.row_multiple(mesh, tcfg.micro_batches)
  extra = {}  # as each revision's trainer calls it
  if "micro_batches" in inspect.signature(m.batch.build_batch).parameters:
    extra["micro_batches"] = tcfg.micro_batches
  batch, n_seq = m.batch.build_batch(groups, loss, args.row_len, 1, mult, tok.pad_id, **extra)
  ref_fn = m.train_step.make_compute_logprobs(
    cfg, tcfg, mesh, shardings.params, batch, loss_only=True
  )
  _, ref_first = timed(ref_fn, state.ref_params, batch)  # the first call compiles
  ref_lp, ref_s = timed(ref_fn, state.ref_params, batch)
  batch = dict(batch, ref_logprobs_BT=np.asarray(ref_lp))
  step = m.train_step.make_train_step(cfg, tcfg, mesh, shardings, batch)
  t = time.perf_counter()
  compiled = step.lower(state, batch).compile()  # this batch's layout, ahead of the call
  upd_compile = time.perf_counter() - t
  (state, met), upd_s = timed(compiled, state, batch)
  rows, cols = (int(x) for x in batch["tokens_BT"].shape)
  info = dict(
    reference_first_s=ref_first, update_compile_s=upd_compile, batch_rows=rows, batch_cols=cols,
    sequences=n_seq, loss=float(met["loss"]),
    layout=str(m.layout.plan(batch, tcfg, cfg, rows // tcfg.micro_batches)),
  )  # fmt: skip
  return state, ref_s, upd_s, info


def run_steps(args) -> dict:
  """args.steps agentic steps in this process; the last one's report."""
  m = imports()
  cfg, params = m.hf.load(NAME)
  cfg = dataclasses.replace(cfg, remat="full")
  tok = m.hf.load_tokenizer(NAME)
  C = m.config
  tasks = [
    m.procedural.generate(FAMILIES[i % len(FAMILIES)], C.EnvConfig().eval_seed + 1000 + i)
    for i in range(args.tasks)
  ]
  agent = m.agent.AgentConfig(
    protocol="markdown_bash", max_turns=args.turns, max_new_tokens=args.new_tokens,
    max_episode_tokens=args.turns * args.new_tokens, max_context_tokens=args.row_len,
    temperature=1.0, greedy=False, exec_timeout_s=10.0, episode_timeout_s=600.0,
  )  # fmt: skip
  env = C.EnvConfig(backend="bwrap", system_prompt="markdown_bash_v2")
  eng = C.EngineConfig(slots=args.tasks * args.group, max_seq_len=args.row_len)
  tcfg = C.TrainConfig(
    loss=C.LossConfig(kl="k3", kl_coef=0.04), micro_batches=args.micro_batches,
    mesh=m.mesh.MeshConfig(fsdp=-1),
    optim=C.OptimConfig(lr=1e-5, warmup_steps=0, decay_steps=1000),
  )  # fmt: skip
  mesh = m.mesh.make_mesh(tcfg.mesh)
  state, shardings = m.train_state.create_train_state(
    cfg, tcfg, mesh, jax.random.key(0), params=params
  )
  rep = m.replica.Replica(cfg, params, tok, eng, env, agent)
  report = {"load_start": [round(x, 2) for x in os.getloadavg()], "steps": []}
  try:
    for i in range(args.steps):
      before = rep.gen.stats()
      groups, roll_s, parts = rollout(rep, tasks, args.group, args.seed + 7919 * i)
      after = rep.gen.stats()
      state, ref_s, upd_s, info = update(m, cfg, tcfg, mesh, state, shardings, groups, args, tok)
      _, sync_s = timed(lambda p, v=i + 1: rep.gen.load_params(p, version=v), state.params)
      report["steps"].append(round(roll_s + ref_s + upd_s + sync_s, 2))
      prefill = {k: after[k] - before[k] for k in ("prefill_tokens", "cached_prompt_tokens")}
  finally:
    rep.close()
  total = roll_s + ref_s + upd_s + sync_s
  report.update(
    step_s=total, rollout_s=roll_s, reference_s=ref_s, update_s=upd_s, sync_s=sync_s,
    episode_means=parts, prefill=prefill, row_len=args.row_len, **info,
    episodes_per_hour=args.tasks * args.group * 3600 / total,
    peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    load_end=[round(x, 2) for x in os.getloadavg()],
  )  # fmt: skip
  share = {k: report[f"{k}_s"] / total for k in ("rollout", "reference", "update", "sync")}
  print(
    f"agentic GRPO step ({args.tasks} tasks x {args.group}, {args.turns} turns, step "
    f"{args.steps} of {args.steps}): {total:.1f} s = rollout {roll_s:.1f} "
    f"({share['rollout']:.0%}; per episode: generation {parts['gen_s']:.1f} s, tools "
    f"{parts['env_s']:.1f} s, grading {parts['verify_s']:.1f} s) + reference {ref_s:.1f} + "
    f"update {upd_s:.1f} + sync {sync_s:.2f}; reference first call (compiling) "
    f"{info['reference_first_s']:.1f} s, update compile {info['update_compile_s']:.1f} s; "
    f"pass rate {parts['pass_rate']:.2f}",
    file=sys.stderr, flush=True,
  )  # fmt: skip
  return report


def child(tree: str, argv: list[str]) -> dict:
  """This script on `tree`'s code in a fresh process; its JSON report."""
  cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), f"--_root={tree}", *argv]
  env = dict(os.environ, PYTHONPATH=tree)
  out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
  sys.stderr.write(out.stderr[-2000:])
  if out.returncode != 0:
    raise RuntimeError(f"{tree}: exit {out.returncode}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def compare(args, argv) -> dict:
  """Interleaved runs of this tree and `args.baseline`; the same-run ratio."""
  tmp = tempfile.mkdtemp(prefix="agentic-baseline-")
  base = os.path.join(tmp, "tree")
  git = ["git", "-C", str(ROOT)]
  subprocess.run([*git, "worktree", "add", "--detach", base, args.baseline], check=True,
                 capture_output=True)  # fmt: skip
  runs = {"baseline": [], "this": []}
  try:
    for r in range(args.repeats):
      order = ("baseline", "this") if r % 2 == 0 else ("this", "baseline")
      for who in order:
        rep = child(base if who == "baseline" else str(ROOT), argv)
        runs[who].append(rep)
        print(json.dumps(dict(tree=who, **rep)), flush=True)
  finally:
    subprocess.run([*git, "worktree", "remove", "--force", base], check=False)
    shutil.rmtree(tmp, ignore_errors=True)
  med = lambda who, k: statistics.median(x[k] for x in runs[who])
  ratios = [b["step_s"] / t["step_s"] for b, t in zip(runs["baseline"], runs["this"], strict=True)]
  return dict(
    baseline=args.baseline, repeats=args.repeats, speedup_median=statistics.median(ratios),
    speedups=[round(x, 3) for x in ratios],
    episodes_per_hour={w: med(w, "episodes_per_hour") for w in runs},
    step_s={w: med(w, "step_s") for w in runs},
    parts_s={w: {k: med(w, f"{k}_s") for k in ("rollout", "reference", "update", "sync")}
             for w in runs},
  )  # fmt: skip


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--tasks", type=int, default=8)
  ap.add_argument("--group", type=int, default=4)
  ap.add_argument("--turns", type=int, default=2)
  ap.add_argument("--new_tokens", type=int, default=96)
  ap.add_argument("--row_len", type=int, default=1024)
  ap.add_argument("--micro_batches", type=int, default=4)
  ap.add_argument("--steps", type=int, default=2, help="steps per run; the last is reported")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--baseline", default="", help="a git revision to compare against")
  ap.add_argument("--repeats", type=int, default=2, help="runs of each tree (with --baseline)")
  ap.add_argument("--_root", default="", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.baseline:
    argv = [a for a in sys.argv[1:] if not a.startswith(("--baseline", "--repeats"))]
    print(json.dumps(compare(args, argv)))
    return 0
  report = run_steps(args)
  print(json.dumps(report))
  return 0 if report["episode_means"]["infra_errors"] == 0 else 1


if __name__ == "__main__":
  raise SystemExit(main())
