"""The RL host loop: rollouts in sandboxes -> buffer -> jitted GRPO step -> weight sync, resumable.

Legend: B groups per update, G samples per group, T tokens per packed row.

One code path serves both modes. The rollout producer admits groups under AReaL's rule
(`rl.runtime.buffer`); `sync` is staleness 0 (the next batch's episodes start only after the update,
so every token comes from the current policy), `async` lets rollouts run up to `max_staleness`
versions ahead while the trainer updates (decoupled PPO corrects the off-policy tokens: set
`train.loss.decoupled=True`). Each update:

  groups = buffer.get_batch()          # waits: that wait is the trainer's idle time
  task source / quality gate see the batch's results
  batch = pack(advantages(groups))     # host side, rl.batch; rows bucketed to powers of 2
  state, metrics = train_step(state, batch)
  generator.load_params(state.params, version=step)   # weight sync, no recompile
  store.write_batch(step, ids); telemetry; eval; checkpoint (every K steps, on SIGTERM, at end)

With `loop.algorithm="rft"` the batch is the groups' distinct verified successes under the
supervised loss instead (rl/rft.py; the ids recorded are those trained); the rest is the same.

Resume (`run` with a workdir holding checkpoints): params, optimizer, step, RNG, task-source
state, the buffer's groups and the in-flight accounting are restored; in-flight groups are
re-issued with their ids and tasks; groups finished after the checkpoint are re-used from the
Parquet store; batch records of later steps are discarded and redone. Nothing finished is lost
and no trajectory is trained twice (tests/test_launch_resume.py proves it with `kill -9`).
"""

from __future__ import annotations

import collections
import time

import jax
import numpy as np

from rl import rft
from rl.batch import build_batch, row_multiple
from rl.config import LoopConfig
from rl.runtime.buffer import BufferClosed, StalenessBuffer
from rl.runtime.checkpoint import Checkpointer
from rl.runtime.records import Group
from rl.runtime.rollout import RolloutManager
from rl.runtime.telemetry import Telemetry
from rl.runtime.trajectory_store import TrajectoryStore
from rl.train_state import policy_params
from rl.train_step import make_train_step


def engine_params(params):
  """A copy of the trainer's params for the engine: the train step donates its state, so weights
  the engine still decodes with (async rollouts run during the update) must not alias it."""
  return jax.device_put(params, may_alias=False)


def rollout_metrics(groups: list[Group]) -> dict:
  """Pass rates (overall, per domain, per difficulty) and reward statistics of a batch."""
  rows = [r for g in groups for r in g.rows]
  out = {}
  rewards = np.array([r["reward"] for r in rows], np.float64)
  # "passed" is the verifier's (envs.episodes.Outcome.passed), as in the held-out eval.
  out["pass_rate/overall"] = float(np.mean([bool(r["passed"]) for r in rows]))
  for key, name in (("domain", "domain"), ("difficulty", "difficulty")):
    by = collections.defaultdict(list)
    for r in rows:
      by[r[key]].append(bool(r["passed"]))
    for k, v in by.items():
      out[f"pass_rate/{name}/{k}"] = float(np.mean(v))
  out.update(
    {
      "reward/mean": float(rewards.mean()),
      "reward/std": float(rewards.std()),
      "reward/min": float(rewards.min()),
      "reward/max": float(rewards.max()),
    }
  )
  gen = [r["generated_tokens"] for r in rows]
  out["episode/generated_tokens"] = float(np.mean(gen))
  out["episode/turns"] = float(np.mean([r["num_turns"] for r in rows]))
  out["episode/tool_error_frac"] = float(
    sum(r["tool_errors"] for r in rows) / max(1, sum(r["num_turns"] for r in rows))
  )
  out["episode/finished_frac"] = float(np.mean([r["finish_reason"] == "finish" for r in rows]))
  out["sandbox/env_s"] = float(np.mean([r["env_s"] for r in rows]))
  out["sandbox/verify_s"] = float(np.mean([r["verify_s"] for r in rows]))
  return out


def token_staleness(groups: list[Group], version: int) -> np.ndarray:
  """`version - v` for every loss token's policy version v (the per-token rule)."""
  out = [
    version - v
    for g in groups
    for r in g.rows
    for v, m in zip(r["versions"], r["loss_mask"], strict=True)
    if m and v >= 0
  ]
  return np.asarray(out, np.int64)


class Trainer:
  """Drives updates from the buffer; see the module docstring for the order of work."""

  def __init__(
    self,
    *,
    cfg: LoopConfig,
    train_cfg,
    model_cfg,
    mesh,
    state,
    state_shardings,
    generator,
    rollouts: RolloutManager,
    buffer: StalenessBuffer,
    store: TrajectoryStore,
    checkpointer: Checkpointer,
    telemetry: Telemetry,
    evaluate=None,
    on_batch=None,
    pad_id: int = 0,
    temperature: float = 1.0,  # the rollouts' (agent.temperature): the step scores at it
  ):
    self.cfg, self.train_cfg, self.model_cfg, self.mesh = cfg, train_cfg, model_cfg, mesh
    self.temperature = temperature
    self.state, self.state_shardings = state, state_shardings
    self.generator, self.rollouts, self.buffer = generator, rollouts, buffer
    self.store, self.ckpt, self.tel = store, checkpointer, telemetry
    self.evaluate, self.on_batch, self.pad_id = evaluate, on_batch, pad_id
    self.step = 0
    self._step_fn = None
    self.compiles = 0  # update-step compilations so far (train/compiles)
    self.row_multiple = row_multiple(mesh, train_cfg.micro_batches)
    self.history: list[dict] = []
    self.replay: collections.deque = collections.deque(maxlen=max(1, cfg.replay_capacity))

  # -- resume -------------------------------------------------------------
  def restore(self) -> dict | None:
    """Restores the latest checkpoint, if any; returns the groups to re-issue."""
    out = self.ckpt.restore(self.state)
    if out is None:
      return None
    self.state, host = out
    self.step = int(host["step"])
    ro = host["rollout"]
    reissue = self.rollouts.restore(ro)
    self.buffer.restore(self.step, [Group.from_json(g) for g in ro["buffer"]])
    self.replay.clear()  # the checkpoint's buffer replaces this one's (restore twice: same)
    self.replay.extend(Group.from_json(g) for g in host.get("replay", []))
    self.store.discard_batches_after(self.step)
    self.tel.event(
      "resume",
      step=self.step,
      inflight=len(ro["inflight"]),
      buffered=len(ro["buffer"]),
      next_group_id=ro["next_group_id"],
    )
    return reissue

  def host_state(self) -> dict:
    snap = self.rollouts.snapshot()  # drops included, taken under the same lock
    replay = [g.to_json() for g in self.replay] if self.cfg.replay_groups else []
    return {"step": self.step, "rollout": snap, "replay": replay, "time": time.time()}

  def params_for_engine(self):
    """The weights the generator loads after each update (a hook: rl.runtime.multihost's
    LeaderTrainer gathers them across processes); under LoRA the base with merged adapters."""
    return engine_params(policy_params(self.state, self.train_cfg))

  # -- one update ---------------------------------------------------------
  def _wait_batch(self) -> list[Group]:
    deadline = time.monotonic() + self.cfg.batch_timeout_s
    while True:
      self.rollouts.check()
      try:
        groups = self.buffer.get_batch(timeout=0.5)
      except BufferClosed:
        self.rollouts.check()
        raise
      if groups is not None:
        return groups
      if self.ckpt.preempted:
        return []
      if time.monotonic() > deadline:
        raise TimeoutError(f"no batch in {self.cfg.batch_timeout_s}s: {self.buffer.stats()}")

  def _replayed(self) -> list[Group]:
    """Up to `replay_groups` recent groups within `replay_max_staleness` (seeded by step)."""
    if not self.cfg.replay_groups:
      return []
    ok = [g for g in self.replay if self.step - g.min_version <= self.cfg.replay_max_staleness]
    rng = np.random.default_rng([self.cfg.seed, self.step])
    idx = rng.permutation(len(ok))[: self.cfg.replay_groups]
    return [ok[i] for i in sorted(idx)]

  def step_fn(self, batch: dict):
    """The jitted update step, built for the first batch's shardings."""
    if self._step_fn is None:
      self._step_fn = make_train_step(
        self.model_cfg, self.train_cfg, self.mesh, self.state_shardings, batch,
        temperature=self.temperature,
      )  # fmt: skip
    return self._step_fn

  def _batch(self, groups: list[Group], replayed: list[Group]):
    """(packed batch or None, sequences, [(group, row, replayed)] trained, metrics) under
    `loop.algorithm`: GRPO trains every row of the groups; RFT only the distinct successes."""
    args = (self.cfg.row_len, self.cfg.max_segments, self.row_multiple, self.pad_id)
    if self.cfg.algorithm == "rft":
      kept, passed = rft.successes(groups)
      batch, n_seqs = rft.build_batch(kept, *args)
      info = {"rft/passed": float(passed), "rft/kept": float(len(kept))}
      return batch, n_seqs, [(g, r, False) for g, r in kept], info
    micro = self.train_cfg.micro_batches  # a group's rows side by side in each micro-batch
    batch, n_seqs = build_batch(groups + replayed, self.train_cfg.loss, *args, micro)
    trained = [
      (g, r, rep) for gs, rep in ((groups, False), (replayed, True)) for g in gs for r in g.rows
    ]
    return batch, n_seqs, trained, {}

  def train_batch(self, batch: dict) -> dict:
    """One optimizer step on a packed batch (a hook: LeaderTrainer announces it first)."""
    fn = self.step_fn(batch)
    n = fn._cache_size()
    self.state, metrics = fn(self.state, batch)
    self.compiles += fn._cache_size() - n  # a new batch layout (rl.layout)
    return metrics  # on device: update() reads the last step's once

  def update(self, last_end: float) -> dict:
    t0 = time.monotonic()
    # In group-id order: the packed batch (and so the update, bit for bit) does not depend
    # on which group finished first.
    groups = sorted(self._wait_batch(), key=lambda g: g.group_id)
    if not groups:
      return {}
    t1 = time.monotonic()
    extra = {}
    if self.on_batch is not None:
      with self.rollouts.lock:  # the task source is shared with the producer
        extra = self.on_batch(groups) or {}  # task statistics, quality audits, quarantine
    replayed = self._replayed()
    if self.cfg.replay_groups:
      self.replay.extend(g for g in groups if max(g.rewards) > min(g.rewards))
    batch, n_seqs, trained, extra_algo = self._batch(groups, replayed)
    metrics = {}
    for _ in range(self.cfg.updates_per_batch if batch is not None else 0):
      metrics = self.train_batch(batch)  # the last step's metrics: its ratios show the drift
    metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
    t2 = time.monotonic()
    self.step += 1
    self.generator.load_params(self.params_for_engine(), self.step)
    self.buffer.set_version(self.step)
    t3 = time.monotonic()
    self.store.write_batch(
      self.step,
      [
        dict(
          trajectory_id=r["trajectory_id"],
          group_id=g.group_id,
          staleness=self.step - 1 - min(r["min_version"], g.min_version)
          if r.get("min_version", -1) >= 0
          else self.step - 1 - g.min_version,
          replayed=rep,
        )
        for g, r, rep in trained
      ],
    )
    self.rollouts.controller.update(len(self.buffer))
    out = self._metrics(groups, metrics, n_seqs, batch, last_end, (t0, t1, t2, t3))
    out.update(extra_algo)
    self.tel.episodes(self.step, groups)  # three sampled episodes: console + TensorBoard text
    gs = self.generator.stats()
    out.update(
      extra,
      **{
        f"engine/{k}": float(gs[k])
        for k in (
          "tokens_per_s", "active_slots", "pages_used", "cached_prompt_tokens", "prefill_tokens",
          "swaps", "swap_wait_s", "reprefilled_sessions",
        )
        if k in gs
      },
    )  # fmt: skip
    return out

  def _metrics(self, groups, train, n_seqs, batch, last_end, times) -> dict:
    t0, t1, t2, t3 = times
    now = time.monotonic()
    out = {f"train/{k}": v for k, v in train.items()}
    out.update(rollout_metrics(groups))
    stal = [self.step - 1 - g.min_version for g in groups]
    out.update({"staleness/mean": float(np.mean(stal)), "staleness/max": float(max(stal))})
    tok = token_staleness(groups, self.step - 1)
    if tok.size:  # per trained token: version trained at - version that sampled it
      out.update(
        {"staleness/token_mean": float(tok.mean()), "staleness/token_max": float(tok.max())}
      )
    wall = max(now - last_end, 1e-9)
    rows, row_len = batch["tokens_BT"].shape if batch is not None else (0, 0)  # RFT: no success
    gen_tok = sum(r["generated_tokens"] for g in groups for r in g.rows)
    out.update(
      {
        "time/step_s": wall,
        "time/wait_s": t1 - t0,
        "time/train_s": t2 - t1,  # includes compiling a new layout (train/compiles)
        "time/sync_s": t3 - t2,
        "time/idle_frac": (t1 - t0) / wall,
        "throughput/rollout_tokens_per_s": gen_tok / wall,
        "throughput/train_tokens_per_s": rows * row_len / max(t2 - t1, 1e-9),
        "throughput/trajectories_per_s": sum(len(g.rows) for g in groups) / wall,
        "batch/sequences": n_seqs,
        "batch/rows": rows,
        "train/compiles": float(self.compiles),
      }
    )
    st = self.buffer.stats()
    out.update(
      {
        "buffer/size": st["size"],
        "buffer/running": st["running"],
        "buffer/zero_variance_dropped": st.get("zero_variance", 0),
        "buffer/stale_dropped": st.get("stale_dropped", 0),
        "buffer/batch_waits": st.get("batch_waits", 0),  # waits for a group near the cap
        "buffer/infra_masked": st.get("infra", 0),
        "rollout/concurrency": self.rollouts.controller.limit,
        "rollout/prefetched_ready": self.rollouts.prefetched_ready,
      }
    )
    out.update(
      {f"buffer/{k}": v for k, v in st.items() if k.startswith("stale_dropped/")}
    )  # per domain and difficulty: a bias against slow tasks shows here
    eps = []
    while self.rollouts.episode_stats:
      eps.append(self.rollouts.episode_stats.popleft())
    if eps:
      out["sandbox/infra_errors"] = float(sum(e["infra"] for e in eps))
    self.tel.histogram(self.step, "staleness", stal)
    self.tel.histogram(self.step, "reward", [r["reward"] for g in groups for r in g.rows])
    return out

  # -- the loop -----------------------------------------------------------
  def run(self) -> list[dict]:
    reissue = self.restore() or {}
    self.generator.load_params(self.params_for_engine(), self.step)
    self.buffer.set_version(self.step)
    if self.step == 0:
      self.ckpt.save(0, self.state, self.host_state(), force=True)
    if self.step < self.cfg.steps:  # loop.steps=0 (a warm start alone) samples nothing
      self.rollouts.start(reissue)
    if self.evaluate is not None and self.step == 0:
      self._eval()
    last_end = time.monotonic()
    try:
      while self.step < self.cfg.steps and not self.ckpt.preempted:
        metrics = self.update(last_end)
        if not metrics:
          break
        last_end = time.monotonic()
        self.tel.log(
          self.step,
          metrics,
          show=("pass_rate/overall", "reward/mean", "time/idle_frac", "staleness/max"),
        )
        self.history.append({"step": self.step, **metrics})
        if (
          self.evaluate is not None and self.cfg.eval_every and self.step % self.cfg.eval_every == 0
        ):
          self._eval()
        self.ckpt.save(
          self.step,
          self.state,
          self.host_state(),
          force=self.step == self.cfg.steps or self.ckpt.preempted,
        )
      if self.ckpt.preempted:  # SIGTERM: make sure the last finished step is saved
        self.ckpt.save(self.step, self.state, self.host_state(), force=True)
        self.tel.event("preempted", step=self.step)
    finally:
      self.rollouts.stop()
      self.ckpt.wait()
    if (
      self.evaluate is not None
      and self.step == self.cfg.steps
      and (not self.cfg.eval_every or self.step % self.cfg.eval_every)
    ):
      self._eval()
    return self.history

  def _eval(self) -> dict:
    t0 = time.monotonic()
    res = self.evaluate()
    res["eval/time_s"] = time.monotonic() - t0
    self.tel.log(self.step, res)
    self.tel.write(
      f"[eval] step {self.step}: pass rate {res.get('eval/pass_rate/overall', float('nan')):.3f}"
    )
    self.history.append({"step": self.step, **res})
    return res
