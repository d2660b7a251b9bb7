"""RolloutManager logic with a deterministic in-process episode function (the sandbox path is
covered end to end by test_trainer_toy / test_launch_resume): dynamic sampling, infra retries and
masking, priorities, in-flight accounting and re-use of stored groups."""

import threading

from envs.agents import agent
from envs.episodes import Outcome
from envs.task import Task, TestSpec
from rl.config import RolloutConfig
from rl.runtime.buffer import StalenessBuffer
from rl.runtime.rollout import RolloutManager
from rl.runtime.trajectory_store import TrajectoryStore


class Tasks:
  def __init__(self, priorities=None):
    self.priorities = priorities or {}

  def task_for(self, gid):
    return self.get(f"t{gid}")

  def get(self, task_id):
    p = self.priorities.get(task_id, 0)
    return Task(task_id, "do", "file_ops", 1, TestSpec(), metadata=(("priority", p),))

  def state_dict(self):
    return {}


class Episodes:
  """reward = 1 for odd samples, except tasks t0, t3, t6, ... (all 0: zero variance); `flaky`
  episodes fail once with an infra error, `dead` tasks always do."""

  def __init__(self, flaky=(), dead=()):
    self.flaky, self.dead, self.calls, self.lock = set(flaky), set(dead), [], threading.Lock()

  def __call__(self, task, tid, seed):
    with self.lock:
      self.calls.append(tid)
      first = self.calls.count(tid) == 1
    seg = agent.Segment([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.5], [-1, 0, 0])
    ep = agent.Episode(tid, [seg], [agent.TurnRecord("a", "shell", None)], "finish")
    if task.id in self.dead or (tid in self.flaky and first):
      ep.infra_error = "SandboxError: killed"
      return Outcome(ep, infra_error=ep.infra_error)
    gid = int(task.id[1:])
    r = 0.0 if gid % 3 == 0 else float(int(tid[-2:]) % 2)
    return Outcome(ep, r, passed=r == 1.0)


def _manager(tmp_path, episodes, tasks, batch=2, **kw):
  buf = StalenessBuffer(batch_size=batch, max_staleness=0)
  events = []
  cfg = RolloutConfig(group_size=2, max_concurrency=4, **kw)
  m = RolloutManager(
    cfg,
    run_episode=episodes,
    tasks=tasks,
    buffer=buf,
    store=TrajectoryStore(tmp_path),
    on_event=lambda k, **f: events.append((k, f)),
  )
  return m, buf, events


def test_dynamic_sampling_infra_retry_and_masking(tmp_path):
  eps = Episodes(flaky={"g0000001-s01"}, dead={"t2"})
  m, buf, events = _manager(tmp_path, eps, Tasks())
  m.start()
  try:
    groups = buf.get_batch(timeout=30)
  finally:
    m.stop()
  # t0 (zero variance) dropped, t2 masked (always infra), t1 (after one retry) and t4 accepted.
  assert [g.group_id for g in sorted(groups, key=lambda g: g.group_id)] == [1, 4]
  st = buf.stats()
  assert st["zero_variance"] >= 1 and st["infra"] == 1
  assert eps.calls.count("g0000001-s01") == 2  # retried once
  assert ("group_masked", {"group_id": 2, "task_id": "t2"}) in events
  assert any(k == "infra_error" and f["trajectory_id"] == "g0000001-s01" for k, f in events)
  stored = TrajectoryStore(tmp_path).read(["trajectory_id", "infra_error"]).to_pylist()
  assert {"g0000000-s00", "g0000001-s01", "g0000004-s01"} <= {r["trajectory_id"] for r in stored}
  g1 = TrajectoryStore(tmp_path).read_group(1)
  assert all(r["infra_error"] is None for r in g1)  # the stored row is the successful retry


def test_priorities_and_inflight_accounting(tmp_path):
  eps = Episodes()
  prio = {"t2": 5, "t3": 1}  # t3 has zero variance and is dropped; t2 goes first
  m, buf, _ = _manager(tmp_path, eps, Tasks(prio), batch=1, lookahead=4, dynamic_sampling=False)
  m.start()
  try:
    (g,) = buf.get_batch(timeout=30)
    snap = m.snapshot()
  finally:
    m.stop()
  assert g.group_id == 2 and eps.calls[0].startswith("g0000002")
  assert snap["next_group_id"] == 4
  assert set(snap["inflight"]) == {"0", "1", "3"}  # issued (queued or running), not finished


def test_reissued_groups_reuse_the_store(tmp_path):
  eps = Episodes()
  m, buf, _ = _manager(tmp_path, eps, Tasks(), batch=1)
  m.start()
  try:
    (g,) = buf.get_batch(timeout=30)
  finally:
    m.stop()
  assert g.group_id == 1 and len(eps.calls) == 4  # group 0 ran and was dropped (zero variance)
  eps2 = Episodes()
  m2, buf2, events = _manager(tmp_path, eps2, Tasks(), batch=1)
  m2.next_group_id = 2
  m2.start(reissue={1: "t1"})  # as after a crash: group 1 finished but was not trained
  try:
    (g2,) = buf2.get_batch(timeout=30)
  finally:
    m2.stop()
  assert g2.group_id == 1 and g2.rows == g.rows
  assert ("group_reused", {"group_id": 1}) in events and not any(
    "g0000001" in c for c in eps2.calls
  )


def test_sampled_eval_draws_a_different_seed_for_every_task():
  """A policy that passes when its first sampled draw lands in the right half: with one seed for
  every task (the old eval) all 64 tasks draw the same choice and the rate is 0 or 1."""
  import numpy as np

  from rl.runtime.evaluation import evaluate

  def coin(task, tid, seed):
    seg = agent.Segment([1, 2], [0, 1], [0.0, -0.7], [-1, 0])
    ep = agent.Episode(tid, [seg], [agent.TurnRecord("a", "shell", None)], "finish")
    ok = float(np.random.default_rng(seed).random() < 0.5)
    return Outcome(ep, ok, passed=ok == 1.0)

  tasks = [Task(f"t{i}", "do", "file_ops", 1, TestSpec()) for i in range(64)]
  first = evaluate(coin, tasks, workers=4)
  assert 0.3 < first["eval/pass_rate/overall"] < 0.7
  assert evaluate(coin, tasks, workers=4) == first  # the same seeds at every eval
  assert evaluate(coin, tasks, workers=4, seed=1) != first
