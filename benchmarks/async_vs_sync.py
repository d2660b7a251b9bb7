r"""Async vs sync RL on heavy-tailed episodes, over seeds and the whole run.

  python benchmarks/async_vs_sync.py [--seeds=0,1,2] [--steps=16] [--eta=3 --cap=6]
  python benchmarks/async_vs_sync.py --kv_probe     # the KV-cache policy at a weight swap

Same everything but `loop.mode`: the toy's echo_word task in real bubblewrap sandboxes, graded
by the real verifier, one shared SFT warm start (saved as a Hugging Face checkpoint, loaded by
every run). Every group's hidden tests sleep `base_s`, a seeded `slow_frac` of the groups (the
slow tasks) `slow_factor` times longer (`--slow_phase=setup`: in the set-up instead). Both modes
prefetch `--prefetch` groups' sandboxes. Async: admission eta, per-token cap
(`loop.max_token_staleness`), decoupled PPO, in-flight weight updates.
Reported per mode, mean and sd over seeds, every step included (compiles and the first steps
too): trajectories/s, trainer idle fraction, final training reward (mean of the last 3 steps:
the reward of the batches trained on, which in async were sampled by policies up to the cap
older), the policy's own reward on fresh sampled episodes of the training task before the first
and after the last step (`--eval_episodes`, the same seeds in both modes),
the slow groups' share of trained trajectories against their share of the issued groups (with
the binomial sd), stale drops and the oldest trained token; the plot is training reward vs
trajectories consumed (each seed and the mean). Targets: async >= 3x sync trajectories/s, idle
<= 10%, final reward within one sd of sync, slow share within noise.
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
from rl.runtime.trajectory_store import TrajectoryStore


class HeavyTailTasks(task_sources.ProceduralTasks):
  """echo_word tasks whose set-up or hidden tests sleep base_s, or slow_factor * base_s for a
  seeded `slow_frac` of the groups (the slow tasks of the pool; `slow_groups` records them)."""

  def __init__(self, *a, base_s, slow_frac, slow_factor, phase, slow_seed: int, **kw):
    super().__init__(*a, **kw)
    self.base_s, self.slow_frac, self.slow_factor = base_s, slow_frac, slow_factor
    self.phase, self.slow_seed = phase, slow_seed
    self.slow_groups: set[int] = set()

  def is_slow(self, group_id: int) -> bool:
    rng = np.random.default_rng([self.slow_seed, group_id, 7])
    return bool(rng.random() < self.slow_frac)

  def task_for(self, group_id: int, salt: int = 0):
    task = super().task_for(group_id, salt)
    if salt:  # demonstrations: no delay
      return task
    slow = self.is_slow(group_id)
    if slow:
      self.slow_groups.add(group_id)
    d = self.base_s * (self.slow_factor if slow else 1.0)
    if self.phase == "setup":
      return dataclasses.replace(task, setup_script=f"sleep {d:.3f}\n")
    (sh,) = task.tests.files  # echo_word: one test.sh; sleep after its shebang line
    head, body = sh.data.split(b"\n", 1)
    slow_sh = dataclasses.replace(sh, data=head + f"\nsleep {d:.3f}\n".encode() + body)
    return dataclasses.replace(task, tests=dataclasses.replace(task.tests, files=(slow_sh,)))


def base_config(args, seed: int = 0):
  c = toy.get_config()
  # A policy big enough that its update is a real share of the step, as a real model's is
  # (defaults: width 384 x 4 layers, ~1.5 s an update alone): admission keeps at most
  # (eta + 1) * batch_groups groups in flight, so the trainer never waits only if
  # (eta + 1) * update time >= a group's latency (benchmarks/RESULTS.md, 2026-12-05).
  m = c.model
  m.d_model, m.n_layers, m.head_dim, m.d_ff = (
    args.width,
    args.layers,
    args.width // 4,
    3 * args.width,
  )
  c.loop.seed = seed
  c.loop.steps = args.steps
  c.loop.batch_groups = args.batch_groups
  c.loop.max_staleness = args.eta
  c.loop.max_token_staleness = args.cap
  c.loop.checkpoint_every = 1000
  c.rollout.group_size = 4
  c.rollout.max_concurrency = args.concurrency
  c.rollout.prefetch_groups = args.prefetch
  c.rollout.dynamic_sampling = False  # same number of rollouts per step in both modes
  c.engine.kv_on_swap = args.kv_on_swap
  c.train.loss.decoupled = True
  c.train.optim.lr = args.lr or c.train.optim.lr
  # The policy's own reward before and after training: args.eval_episodes sampled episodes of
  # the training task (no delays), the same seeds in both modes and at both ends.
  c.env.eval_tasks, c.env.eval_greedy, c.loop.eval_every = args.eval_episodes, False, 0
  return c


def warm_start_checkpoint(args, root: pathlib.Path) -> str:
  """SFT once through rl_run.run (0 RL steps) and save the policy as an HF checkpoint (a
  WORKDIR that has one already re-uses it)."""
  from models.io import hf

  if (root / "policy" / "config.json").is_file():
    return str(root / "policy")

  c = base_config(args)
  c.loop.steps = 0
  c.sft.steps = args.sft_steps
  c.env.eval_tasks = 0
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


def run_mode(args, root, policy: str, mode: str, seed: int) -> dict:
  c = base_config(args, seed)
  c.loop.mode = mode
  c.sft.steps = 0
  c.checkpoint = policy
  exp = rl_config.to_experiment(c)
  wd = root / f"{mode}-{seed}"
  made = []

  def src(w, ev):
    made.append(
      HeavyTailTasks(  # the warm start's task (pool seed 0); the run seed: sampling, slowness
        "echo_word",
        0,
        w,
        slow_seed=exp.loop.seed,
        on_event=ev,
        base_s=args.base_s,
        slow_frac=args.slow_frac,
        slow_factor=args.slow_factor,
        phase=args.slow_phase,
        pool_size=exp.env.train_pool_size,
      )
    )
    task = made[-1].task_for(0, salt=-1)  # salt != 0: the plain task, no delay
    n = exp.env.eval_tasks
    return made[-1], [dataclasses.replace(task, id=f"{task.id}-e{i}") for i in range(n)]

  t0 = time.monotonic()
  rl_run.run(exp, str(wd), task_source=src)
  return measure(wd, mode, seed, made[-1], time.monotonic() - t0)


def measure(wd, mode: str, seed: int, tasks, wall: float | None = None) -> dict:
  """One finished run's figures from its metrics and trajectory store."""
  metrics = read_metrics(wd)
  recs = [r for r in metrics if "time/step_s" in r]
  evals = [r["eval/reward/mean"] for r in metrics if "eval/reward/mean" in r]
  all_s = sum(r["time/step_s"] for r in recs)
  trajs = [r["throughput/trajectories_per_s"] * r["time/step_s"] for r in recs]
  store = TrajectoryStore(wd)
  trained = store.read_batches().column("group_id").to_pylist()  # one entry per trajectory
  slow = [tasks.is_slow(g) for g in trained]
  issued = range(max(trained) + 1)  # the pool's draw: every group id up to the last trained
  return {
    "mode": mode,
    "seed": seed,
    # every step, the first ones and those that compiled a new layout included
    "trajectories_per_s": sum(trajs) / all_s,
    "trainer_idle_frac": sum(r["time/wait_s"] for r in recs) / all_s,
    "wall_trajectories_per_s": sum(trajs) / wall if wall else None,  # set-up, shutdown too
    "step_s_mean": all_s / len(recs),
    "final_reward": float(np.mean([r["reward/mean"] for r in recs[-3:]])),
    "reward_curve": [r["reward/mean"] for r in recs],
    # the policy's sampled reward on fresh episodes at the start and after the last step
    "start_policy_reward": evals[0] if evals else None,
    "final_policy_reward": evals[-1] if len(evals) > 1 else None,
    "trajectories_consumed": np.cumsum(trajs).round().astype(int).tolist(),
    "staleness_max": max(r["staleness/max"] for r in recs),
    "token_staleness_max": max(r.get("staleness/token_max", 0) for r in recs),
    "stale_dropped": recs[-1]["buffer/stale_dropped"],
    "batch_waits": recs[-1].get("buffer/batch_waits", 0),
    "trained": len(trained),
    "trained_groups": len(set(trained)),
    "slow_share": float(np.mean(slow)),
    "slow_pool_share": float(np.mean([tasks.is_slow(g) for g in issued])),
    "wall_s": wall,
  }


def summarize(runs: list[dict]) -> dict:
  """Mean and sd over seeds of each scalar, per mode; the ratios async / sync."""
  out = {}
  for mode in ("sync", "async"):
    rs = [r for r in runs if r["mode"] == mode]
    if not rs:
      continue
    keys = ("trajectories_per_s", "trainer_idle_frac", "final_reward", "slow_share")
    keys += ("start_policy_reward", "final_policy_reward")
    for k in keys:
      if any(r[k] is None for r in rs):
        continue
      v = np.array([r[k] for r in rs])
      out[f"{mode}_{k}"] = [float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0]
    # A group is slow or not as a whole, so the binomial unit is the group, not the trajectory.
    n = sum(r["trained_groups"] for r in rs)
    p = float(np.mean([r["slow_pool_share"] for r in rs]))
    out[f"{mode}_slow_pool_share"] = p
    out[f"{mode}_slow_share_binomial_sd"] = float(np.sqrt(p * (1 - p) / n))  # pooled over seeds
    out[f"{mode}_stale_dropped"] = sum(r["stale_dropped"] for r in rs)
    out[f"{mode}_token_staleness_max"] = max(r["token_staleness_max"] for r in rs)
  if "sync_trajectories_per_s" in out and "async_trajectories_per_s" in out:
    by = {(r["mode"], r["seed"]): r for r in runs}
    sp = [
      by["async", seed]["trajectories_per_s"] / by["sync", seed]["trajectories_per_s"]
      for mode, seed in by
      if mode == "sync" and ("async", seed) in by
    ]
    out["speedup_per_seed"] = sp
    out["speedup"] = float(np.mean(sp))
    a, s = out["async_final_reward"], out["sync_final_reward"]
    out["reward_gap_in_sync_sd"] = (a[0] - s[0]) / max(s[1], 1e-9)
    if "async_final_policy_reward" in out and "sync_final_policy_reward" in out:
      a, s = out["async_final_policy_reward"], out["sync_final_policy_reward"]
      out["policy_reward_gap"] = a[0] - s[0]
      out["policy_reward_gap_in_sync_sd"] = (a[0] - s[0]) / max(s[1], 1e-9)
      # The sync seeds can tie (all three 43 of 48), leaving a sync sd of 0: the gap is also
      # given in the two modes' pooled sd.
      out["policy_reward_gap_in_pooled_sd"] = (a[0] - s[0]) / max(
        np.hypot(a[1], s[1]) / 2**0.5, 1e-9
      )
  return out


def plot(runs: list[dict], path: pathlib.Path) -> None:
  """Training reward (batch mean) vs trajectories consumed, each seed thin, the mean over seeds
  thick; diamonds: the policy's reward on fresh episodes before and after (mean ± sd)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 3.6))
  for mode, color in (("sync", "tab:blue"), ("async", "tab:orange")):
    rs = [r for r in runs if r["mode"] == mode]
    for r in rs:
      ax.plot(r["trajectories_consumed"], r["reward_curve"], color=color, alpha=0.3, lw=0.8)
    if rs:
      n = min(len(r["reward_curve"]) for r in rs)
      mean = np.mean([r["reward_curve"][:n] for r in rs], axis=0)
      ax.plot(rs[0]["trajectories_consumed"][:n], mean, color=color, lw=2, label=f"{mode} mean")
    ends = [r for r in rs if r.get("final_policy_reward") is not None]
    if ends:  # the policy's own reward on fresh episodes, before and after (mean ± sd)
      xs = [0, np.mean([r["trajectories_consumed"][-1] for r in ends])]
      ys = [[r[k] for r in ends] for k in ("start_policy_reward", "final_policy_reward")]
      ax.errorbar(
        xs, [np.mean(y) for y in ys], yerr=[np.std(y, ddof=1) if len(y) > 1 else 0 for y in ys],
        color=color, marker="D", ls="none", capsize=3, label=f"{mode} policy, fresh episodes",
      )  # fmt: skip
  ax.set_xlabel("trajectories consumed")
  ax.set_ylabel("reward")
  ax.legend()
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def kv_probe(turns: int = 4, new_tokens: int = 24, episodes: int = 8, step: float = 0.0) -> dict:
  """Both KV-cache policies (rl.runtime.weight_sync) on a tiny random model.

  `episodes` sessions of `turns` turns; during every turn a swap to the next weights is
  requested while the turn's requests are in flight. Mismatch: |recorded behaviour log-prob -
  the log-prob recomputed from scratch under the version the token is tagged with|; cost: the
  policy's wall time and prefill tokens (a first pass compiles everything, untimed).
  step = 0: each version is an independent init (far apart); step > 0: each version moves every
  weight by a relative `step` of Gaussian noise (near, like one small update).
  """
  import jax
  import jax.numpy as jnp

  from models import config as model_config
  from models import transformer as tfm
  from models.inference.engine import Engine
  from models.inference.generator import GenerationRequest, Generator
  from models.sampling import SamplingParams
  from rl.runtime.weight_sync import ExactSwap

  L = 256
  cfg = model_config.tiny("qwen3", max_seq_len=L)
  params = []
  for v in range(turns + 1):  # scaled up so versions differ visibly (as in the engine tests)
    p = tfm.init(cfg, jax.random.PRNGKey(0 if step else v))
    layers = jax.tree.map(lambda a: a * 10.0 if a.ndim >= 3 else a, p["layers"])
    params.append(dict(p, embed=p["embed"] * 3.0, layers=layers))
    if step and v:
      leaves, tree = jax.tree.flatten(params[v - 1])
      keys = jax.random.split(jax.random.PRNGKey(100 + v), len(leaves))
      moved = [
        a * (1 + step * jax.random.normal(k, a.shape)) for a, k in zip(leaves, keys, strict=True)
      ]
      params[v] = jax.tree.unflatten(tree, moved)
  fwd = jax.jit(lambda p, t: jax.nn.log_softmax(tfm.apply(p, t, cfg), axis=-1))
  rng = np.random.default_rng(0)
  obs = [[int(x) for x in rng.integers(0, cfg.vocab_size, 6)] for _ in range(turns)]
  first = [[int(x) for x in rng.integers(0, cfg.vocab_size, 20)] for _ in range(episodes)]

  def one(policy):
    eng = Engine(cfg, params[0], max_concurrent_decodes=episodes, page_size=8, max_seq_len=L)
    gen = Generator(eng, decode_chunk=2)
    gen = ExactSwap(gen) if policy == "reprefill" else gen
    ctx, recs = [list(f) for f in first], []
    t0 = time.monotonic()
    for t in range(turns):
      futs = [
        gen.submit(
          GenerationRequest(ctx[e], new_tokens, SamplingParams(seed=e), session_id=f"ep{e}")
        )
        for e in range(episodes)
      ]
      gen.load_params(params[t + 1], t + 1)  # mid-turn: the requests above are in flight
      for e, f in enumerate(futs):
        r = f.result()
        recs.append((list(ctx[e]), r.tokens, r.logprobs, r.versions))
        ctx[e] = ctx[e] + r.tokens + obs[t]
    wall = time.monotonic() - t0
    prefill = gen.stats()["prefill_tokens"]
    gen.close()
    err = []
    for prompt, toks, lps, vers in recs:
      full = np.zeros((1, L), np.int32)
      full[0, : len(prompt) + len(toks)] = prompt + toks
      by_v = {v: np.asarray(fwd(params[v], jnp.asarray(full)))[0] for v in set(vers)}
      n = len(prompt)
      err += [
        abs(lp - by_v[v][n - 1 + i, tok])
        for i, (tok, lp, v) in enumerate(zip(toks, lps, vers, strict=True))
      ]
    err = np.array(err)
    return {
      "mismatch_mean": float(err.mean()),
      "mismatch_max": float(err.max()),
      "tokens_off_by_1e-3": float(np.mean(err > 1e-3)),
      "wall_s": wall,
      "prefill_tokens": int(prefill),
      "generated_tokens": len(err),
    }

  one("keep"), one("reprefill")  # compiles every shape both policies use
  runs = {p: [one(p) for _ in range(3)] for p in ("keep", "reprefill")}  # wall: the fastest
  out = {p: {**rs[0], "wall_s": min(r["wall_s"] for r in rs)} for p, rs in runs.items()}
  out["reprefill_cost_x"] = out["reprefill"]["wall_s"] / out["keep"]["wall_s"]
  out["reprefill_prefill_x"] = out["reprefill"]["prefill_tokens"] / out["keep"]["prefill_tokens"]
  return out


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=16)
  ap.add_argument("--seeds", default="0,1,2")
  ap.add_argument("--batch_groups", type=int, default=4)
  ap.add_argument("--eta", type=int, default=3)
  ap.add_argument("--cap", type=int, default=6, help="loop.max_token_staleness")
  ap.add_argument("--kv_on_swap", default="reprefill", choices=("reprefill", "keep"))
  ap.add_argument("--concurrency", type=int, default=64)
  ap.add_argument("--base_s", type=float, default=1.0)
  ap.add_argument("--slow_frac", type=float, default=0.2)
  ap.add_argument("--slow_factor", type=float, default=10.0)
  ap.add_argument("--slow_phase", choices=("setup", "verify"), default="verify")
  ap.add_argument("--prefetch", type=int, default=16)
  ap.add_argument("--width", type=int, default=384)
  ap.add_argument("--layers", type=int, default=4)
  ap.add_argument("--lr", type=float, default=0.0, help="RL learning rate; 0: the toy's")
  ap.add_argument("--eval_episodes", type=int, default=48, help="policy reward: 0 = off")
  ap.add_argument(
    "--sft_steps", type=int, default=60, help="warm start (width 384: 48 left reward 0, 72 0.9)"
  )
  ap.add_argument("--modes", default="sync,async", choices=("sync,async", "sync", "async"))
  ap.add_argument("--workdir", default="")
  ap.add_argument("--plot", default="", help="PNG path (default: WORKDIR/async_vs_sync.png)")
  ap.add_argument("--kv_probe", action="store_true", help="only the KV-cache policy probe")
  ap.add_argument("--report", action="store_true", help="summarize the finished runs in WORKDIR")
  args = ap.parse_args()
  if args.kv_probe:
    far, near = kv_probe(), kv_probe(step=0.01)
    print(json.dumps({"benchmark": "kv_on_swap", "far": far, "near_1pct": near}, indent=1))
    return
  root = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="agentrl-async-bench-"))
  seeds = [int(x) for x in args.seeds.split(",")]
  runs = []
  if args.report:  # runs that finished (every step logged), e.g. of an interrupted benchmark
    for seed in seeds:
      for m in args.modes.split(","):
        wd = root / f"{m}-{seed}"
        recs = [r for r in read_metrics(wd) if "time/step_s" in r] if wd.is_dir() else []
        if len(recs) == args.steps:
          tasks = HeavyTailTasks(
            "echo_word", 0, wd, slow_seed=seed, base_s=args.base_s, slow_frac=args.slow_frac,
            slow_factor=args.slow_factor, phase=args.slow_phase,
          )  # fmt: skip
          runs.append(measure(wd, m, seed, tasks))
  else:
    policy = warm_start_checkpoint(args, root)
    for seed in seeds:
      for m in args.modes.split(","):  # interleaved: load drifts hit both modes alike
        runs.append(run_mode(args, root, policy, m, seed))
        print(json.dumps({k: v for k, v in runs[-1].items() if not isinstance(v, list)}))
  png = pathlib.Path(args.plot or root / "async_vs_sync.png")
  plot(runs, png)
  out = {"benchmark": "async_vs_sync", "args": vars(args), "plot": str(png), **summarize(runs)}
  out["runs"] = [{k: v for k, v in r.items() if not isinstance(v, list)} for r in runs]
  out["targets"] = {
    "speedup": ">= 3",
    "async_trainer_idle_frac": "<= 0.10",
    "final reward": "async within one sd of sync (the trained policy's reward on fresh "
    "episodes after equal trajectories consumed; the training batches' reward lags in async)",
    "slow_share": "within binomial noise of the pool share",
  }
  print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
  main()
