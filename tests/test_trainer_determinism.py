"""Synchronous runs decide groups in group-id order: which groups are dropped (dynamic sampling
with its budget) and trained does not depend on which episode finished first. That is what
lets a resumed run train on exactly the trajectories of an uninterrupted one."""

import random
import threading
import time

from envs.agents import agent
from envs.episodes import Outcome
from envs.task import Task, TestSpec
from rl.config import RolloutConfig
from rl.runtime.buffer import StalenessBuffer
from rl.runtime.rollout import RolloutManager
from rl.runtime.trajectory_store import TrajectoryStore

B, CAP = 2, 1  # groups per batch; zero-variance drops allowed per policy version


def zero_variance(gid: int) -> bool:
  # Pairs of zero-variance groups run side by side with one drop left: the first one *decided*
  # is dropped; deciding on arrival would drop whichever happened to finish first.
  return gid % 3 != 2


class Tasks:
  def task_for(self, gid):
    return self.get(f"t{gid}")

  def get(self, task_id):
    return Task(task_id, "do", "file_ops", 1, TestSpec())

  def state_dict(self):
    return {}


class Episodes:
  """Rewards fixed by the group id; durations random (seeded per run), so arrival order varies."""

  def __init__(self, seed, buffer):
    self.rng, self.lock, self.buffer = random.Random(seed), threading.Lock(), buffer

  def __call__(self, task, tid, seed):
    with self.lock:
      delay = self.rng.random() * 0.05
    time.sleep(delay)
    gid, sample = int(task.id[1:]), int(tid[-2:])
    r = 0.0 if zero_variance(gid) else float(sample % 2)
    seg = agent.Segment([1, 2], [0, 1], [0.0, -0.5], [-1, self.buffer.version])
    ep = agent.Episode(tid, [seg], [agent.TurnRecord("a", "shell", None)], "finish")
    return Outcome(ep, r, passed=r == 1.0)


def expected_batches(n: int) -> list[list[int]]:
  """A naive sequential reference: versions in turn, groups in id order."""
  out, gid = [], 0
  for _ in range(n):
    drops, batch = 0, []
    while len(batch) < B:
      if zero_variance(gid) and drops < CAP:
        drops += 1
      else:
        batch.append(gid)
      gid += 1
    out.append(batch)
  return out


def run(tmp_path, seed, steps=4):
  buf = StalenessBuffer(batch_size=B, max_staleness=0)
  cfg = RolloutConfig(group_size=2, max_concurrency=8, max_drop_factor=CAP / B)
  m = RolloutManager(
    cfg, run_episode=Episodes(seed, buf), tasks=Tasks(), buffer=buf, store=TrajectoryStore(tmp_path)
  )
  m.start()
  batches = []
  try:
    for v in range(steps):
      batches.append(sorted(g.group_id for g in buf.get_batch(timeout=60)))
      buf.set_version(v + 1)
  finally:
    m.stop()
  return batches


def test_sync_batches_do_not_depend_on_arrival_order(tmp_path):
  want = expected_batches(4)
  for seed in range(3):
    assert run(tmp_path / str(seed), seed) == want, seed
