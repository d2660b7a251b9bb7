r"""Async vs sync RL on heavy-tailed episodes: trajectories/s, trainer idle fraction, reward.

  python benchmarks/async_vs_sync.py [--steps=14] [--slow_phase=setup|verify] [--prefetch=16]

One process, same everything but `loop.mode`: the toy's echo_word task pool in real bubblewrap
sandboxes, graded by the real verifier, a shared SFT warm start (saved once as a Hugging Face
checkpoint, loaded by both runs). Episode durations are heavy-tailed: every task sleeps `base_s`
seconds, and a `slow_frac` of the tasks (seeded) sleep `slow_factor` times longer, either in
the environment's set-up (`--slow_phase=setup`: a slow build) or in its hidden tests
(`--slow_phase=verify`: a slow test suite, after the policy has acted). Both modes prefetch
`--prefetch` groups' sandboxes ahead of admission (rollout.prefetch_groups; 0: off), so set-up
time overlaps with everything else in both. Sync waits for the slowest group of every batch;
async (staleness eta, decoupled PPO) keeps producing while the trainer updates.
Reported: trajectories/s and trainer idle fraction over steps 3..N, leaving out steps that
compiled a new update layout (listed), speedup, final training reward (mean of the last 3 steps). Targets: async >= 1.8x sync,
async idle <= 15%, final reward within noise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout
from configs import toy  # noqa: E402
from rl import config as rl_config
from rl.runtime import run as rl_run
from rl.runtime import task_sources
from rl.runtime.telemetry import read_metrics


class HeavyTailTasks(task_sources.ProceduralTasks):
  """echo_word tasks whose set-up sleeps base_s, or slow_factor * base_s for a seeded few."""

  def __init__(self, *a, base_s: float, slow_frac: float, slow_factor: float, phase: str, **kw):
    super().__init__(*a, **kw)
    self.base_s, self.slow_frac, self.slow_factor = base_s, slow_frac, slow_factor
    self.phase = phase

  def task_for(self, group_id: int, salt: int = 0):
    task = super().task_for(group_id, salt)
    if salt:  # demonstrations: no delay
      return task
    slow = np.random.default_rng([self.seed, group_id, 7]).random() < self.slow_frac
    d = self.base_s * (self.slow_factor if slow else 1.0)
    if self.phase == "setup":
      return dataclasses.replace(task, setup_script=f"sleep {d:.3f}\n")
    (sh,) = task.tests.files  # echo_word: one test.sh; sleep after its shebang line
    head, body = sh.data.split(b"\n", 1)
    slow_sh = dataclasses.replace(sh, data=head + f"\nsleep {d:.3f}\n".encode() + body)
    return dataclasses.replace(task, tests=dataclasses.replace(task.tests, files=(slow_sh,)))


def base_config(args):
  c = toy.get_config()
  m = c.model  # a policy big enough that training is a real share of the step
  m.d_model, m.n_layers, m.head_dim, m.d_ff = (
    args.width,
    args.layers,
    args.width // 4,
    3 * args.width,
  )
  c.loop.steps = args.steps
  c.loop.batch_groups = args.batch_groups
  c.loop.max_staleness = args.eta
  c.loop.checkpoint_every = 1000
  c.rollout.group_size = 4
  c.rollout.max_concurrency = args.concurrency
  c.rollout.prefetch_groups = args.prefetch
  c.rollout.dynamic_sampling = False  # same number of rollouts per step in both modes
  c.train.loss.decoupled = True
  return c


def warm_start_checkpoint(args, root: pathlib.Path) -> str:
  """SFT once through rl_run.run (0 RL steps) and save the policy as an HF checkpoint."""
  from models import hf

  c = base_config(args)
  c.loop.steps = 0
  c.sft.steps = args.sft_steps
  exp = rl_config.to_experiment(c)
  wd = root / "warm_start"
  rl_run.run(
    exp,
    str(wd),
    task_source=lambda w, ev: (
      task_sources.ProceduralTasks(
        "echo_word", exp.loop.seed, w, on_event=ev, pool_size=exp.env.train_pool_size
      ),
      [],
    ),
  )
  import jax

  from rl.runtime.checkpoint import Checkpointer
  from rl.train_state import create_train_state

  mesh = rl_run.training_mesh(exp)
  state, _ = create_train_state(exp.model, exp.train, mesh, jax.random.key(0))
  ck = Checkpointer(wd / "checkpoints")
  state, _ = ck.restore(state)
  ck.close()
  hf.save(root / "policy", exp.model, jax.device_get(state.params))
  return str(root / "policy")


def run_mode(args, root, policy: str, mode: str) -> dict:
  c = base_config(args)
  c.loop.mode = mode
  c.sft.steps = 0
  c.checkpoint = policy
  exp = rl_config.to_experiment(c)
  wd = root / mode
  src = lambda w, ev: (
    HeavyTailTasks(
      "echo_word",
      exp.loop.seed,
      w,
      on_event=ev,
      base_s=args.base_s,
      slow_frac=args.slow_frac,
      slow_factor=args.slow_factor,
      phase=args.slow_phase,
      pool_size=exp.env.train_pool_size,
    ),
    [],
  )
  t0 = time.monotonic()
  rl_run.run(exp, str(wd), task_source=src)
  wall = time.monotonic() - t0
  recs = [r for r in read_metrics(wd) if "time/step_s" in r]
  # steady state: not the first two steps, nor a step that compiled a new batch layout (a few
  # per run, ~10 s each on 2 cores, at random steps in either mode; counted separately)
  prev = [0.0] + [r["train/compiles"] for r in recs[:-1]]
  compiled = [r for r, p in zip(recs, prev, strict=True) if r["train/compiles"] > p]
  recs = [r for r in recs if r["step"] > 2 and r not in compiled]
  step_s = sum(r["time/step_s"] for r in recs)
  trajs = sum(r["throughput/trajectories_per_s"] * r["time/step_s"] for r in recs)
  return {
    "mode": mode,
    "trajectories_per_s": trajs / step_s,
    "trainer_idle_frac": sum(r["time/wait_s"] for r in recs) / step_s,
    "step_s_mean": step_s / len(recs),
    "final_reward": float(np.mean([r["reward/mean"] for r in recs[-3:]])),
    "staleness_max": max(r["staleness/max"] for r in recs),
    "stale_dropped": recs[-1]["buffer/stale_dropped"],
    "steps_measured": len(recs),
    "compile_steps_excluded": [r["step"] for r in compiled],
    "wall_s": wall,
  }


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=14)
  ap.add_argument("--batch_groups", type=int, default=4)
  ap.add_argument("--eta", type=int, default=6)
  ap.add_argument("--concurrency", type=int, default=64)
  ap.add_argument("--base_s", type=float, default=1.0)
  ap.add_argument("--slow_frac", type=float, default=0.2)
  ap.add_argument("--slow_factor", type=float, default=10.0)
  ap.add_argument("--slow_phase", choices=("setup", "verify"), default="verify")
  ap.add_argument("--prefetch", type=int, default=16)
  ap.add_argument("--width", type=int, default=192)
  ap.add_argument("--layers", type=int, default=3)
  ap.add_argument("--sft_steps", type=int, default=toy.get_config().sft.steps)
  ap.add_argument("--modes", default="sync,async", choices=("sync,async", "sync", "async"))
  ap.add_argument("--workdir", default="")
  args = ap.parse_args()
  root = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="agentrl-async-bench-"))
  policy = warm_start_checkpoint(args, root)
  res = {m: run_mode(args, root, policy, m) for m in args.modes.split(",")}
  out = {"benchmark": "async_vs_sync", "args": vars(args)}
  for m, r in res.items():
    out.update({f"{m}_{k}": v for k, v in r.items()})
  if len(res) == 2:
    out["speedup"] = res["async"]["trajectories_per_s"] / res["sync"]["trajectories_per_s"]
  out["targets"] = {"speedup": ">= 1.8", "async_trainer_idle_frac": "<= 0.15"}
  print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
  main()
