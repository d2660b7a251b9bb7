"""The async-correctness suite's loop: the real RolloutManager, StalenessBuffer, scheduler and
TrajectoryStore, fed by seeded episodes, drained by a trainer that only counts versions.

Episodes take several turns, each tagged with the policy version current at that moment (the
weights change under running episodes), and seeded durations: tasks in `SLOW` take
`SLOW_FACTOR` times longer. Durations are short real waits; no assertion depends on them (a
test checks invariants that must hold for every interleaving).

Run as a script it is the process that `tests/test_async_resume.py` kills with SIGKILL and
resumes: it checkpoints the trainer's step and the rollout snapshot (the same in-flight
accounting rl.runtime.trainer.Trainer checkpoints) after every step.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from envs.agents import agent
from envs.episodes import Outcome  # noqa: E402
from envs.task import Task, TestSpec  # noqa: E402
from rl.config import LoopConfig, RolloutConfig  # noqa: E402
from rl.runtime.buffer import StalenessBuffer  # noqa: E402
from rl.runtime.records import Group  # noqa: E402
from rl.runtime.rollout import RolloutManager  # noqa: E402
from rl.runtime.trajectory_store import TrajectoryStore  # noqa: E402

POOL = 10  # tasks; group g gets task g mod POOL
SLOW = frozenset({1, 4, 7})  # 30% of the pool
SLOW_FACTOR = 10
TURNS = 3


class Tasks:
  """A fixed pool; task ids name their slot, the domain says fast or slow."""

  def task_for(self, gid: int) -> Task:
    return self.get(f"t{gid % POOL}")

  def get(self, task_id: str) -> Task:
    slow = int(task_id[1:]) in SLOW
    return Task(task_id, "do", "slow" if slow else "fast", 3 if slow else 1, TestSpec())

  def state_dict(self) -> dict:
    return {}

  def load_state_dict(self, d: dict) -> None:
    del d


class Policy:
  """Stands in for the generator's version counter (trainer.load_params bumps it)."""

  def __init__(self):
    self.version = 0

  def load_params(self, params, version: int) -> None:
    del params
    self.version = version


class Episodes:
  """Seeded durations per episode; each turn's tokens carry the version current then."""

  def __init__(self, policy: Policy, base_s: float = 0.001):
    self.policy, self.base_s = policy, base_s

  def __call__(self, task, tid, seed):
    rng = random.Random(seed)
    scale = SLOW_FACTOR if task.domain == "slow" else 1
    seg = agent.Segment([1], [0], [0.0], [-1])
    for _ in range(TURNS):
      time.sleep(rng.expovariate(1.0) * self.base_s * scale / TURNS)
      v = self.policy.version
      seg.tokens += [2, 3]
      seg.loss_mask += [1, 1]
      seg.logprobs += [-0.5 - 0.01 * v, -0.7]
      seg.versions += [v, v]
    ep = agent.Episode(tid, [seg], [agent.TurnRecord("a", "shell", None)], "finish")
    r = float(rng.random() < 0.5)
    return Outcome(ep, r, passed=r == 1.0)


def make(
  workdir,
  loop: LoopConfig,
  seed: int = 0,
  base_s: float = 0.001,
  *,
  policy=None,
  episodes=None,
  concurrency: int = 16,
):
  """(policy, buffer, store, manager) wired as rl.runtime.run wires them; `episodes` (default
  Episodes(policy, base_s)) runs each episode."""
  policy = Policy() if policy is None else policy
  buf = StalenessBuffer(loop.batch_groups, loop.staleness, loop.token_staleness)
  store = TrajectoryStore(workdir)
  cfg = RolloutConfig(group_size=2, max_concurrency=concurrency, dynamic_sampling=False, seed=seed)
  run_episode = Episodes(policy, base_s) if episodes is None else episodes
  m = RolloutManager(cfg, run_episode=run_episode, tasks=Tasks(), buffer=buf, store=store)
  return policy, buf, store, m


def train(policy, buf, store, m, steps: int, start: int = 0, on_step=None) -> int:
  """Trainer.update's order of work without the update: batch, record, sync, version."""
  step = start
  while step < steps:
    m.check()
    groups = buf.get_batch(timeout=60)
    if groups is None:
      raise TimeoutError(f"no batch in 60 s: {buf.stats()}")
    rows = [
      dict(trajectory_id=r["trajectory_id"], group_id=g.group_id, staleness=step - g.min_version)
      for g in sorted(groups, key=lambda g: g.group_id)
      for r in g.rows
    ]
    step += 1
    store.write_batch(step, rows)
    policy.load_params(None, step)
    buf.set_version(step)
    if on_step is not None:
      on_step(step)
  return step


def _write_json(path: pathlib.Path, obj) -> None:
  tmp = path.with_suffix(".tmp")
  with open(tmp, "w") as f:
    json.dump(obj, f)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def main(workdir: str, steps: int) -> None:
  wd = pathlib.Path(workdir)
  loop = LoopConfig(mode="async", batch_groups=3, max_staleness=2, max_token_staleness=3)
  policy, buf, store, m = make(wd, loop, base_s=0.004)
  ckpt, step, reissue = wd / "ckpt.json", 0, {}
  if ckpt.is_file():  # resume: Trainer.restore's order
    snap = json.loads(ckpt.read_text())
    step = snap["step"]
    reissue = m.restore(snap["rollout"])
    buf.restore(step, [Group.from_json(g) for g in snap["rollout"]["buffer"]])
    store.discard_batches_after(step)
  policy.load_params(None, step)
  buf.set_version(step)
  lock = threading.Lock()

  def save(s):
    with lock:
      _write_json(ckpt, {"step": s, "rollout": m.snapshot()})

  if step == 0:
    save(0)
  m.start(reissue)
  try:
    train(policy, buf, store, m, steps, step, on_step=save)
  finally:
    m.stop()


if __name__ == "__main__":
  main(sys.argv[1], int(sys.argv[2]))
