"""Async correctness: the per-token staleness cap holds for every trained token, no group is
dropped for staleness, and slow tasks are trained as often as their share of the pool.

The real RolloutManager / StalenessBuffer / scheduler / TrajectoryStore run (tests/async_harness);
episodes have seeded random durations and a 10x slower 30% of the pool; the trainer consumes as
fast as batches come, so slow groups fall far behind and the cap is exercised. Assertions are
invariants of every interleaving, not of timing.
"""

import math

import async_harness as h
import pytest

from rl.config import LoopConfig
from rl.runtime import buffer as buf_lib


class G:
  def __init__(self, gid, min_version, domain="fast"):
    self.group_id, self.min_version = gid, min_version
    self.rows = [{"domain": domain, "difficulty": 1}]


def test_trainer_waits_for_a_group_at_the_cap_instead_of_dropping_it():
  b = buf_lib.StalenessBuffer(batch_size=1, max_staleness=1, max_token_staleness=2)
  slow = b.admit_at(timeout=0)  # admitted at version 0: must be trained by version 2
  fast = b.admit_at(timeout=0)
  assert (slow, fast) == (0, 0)
  b.put(G(0, 0), admitted_at=fast)
  b.set_version(1)
  at = b.admit_at(timeout=0)
  b.put(G(1, 1), admitted_at=at)
  assert [g.group_id for g in b.get_batch(timeout=0)] == [0]  # the slow one may still wait
  b.set_version(2)
  # version 2 = 0 + cap: the slow group would expire after this update, so the batch waits
  assert b.get_batch(timeout=0.01) is None
  b.put(G(9, 0, "slow"), admitted_at=slow)
  assert [g.group_id for g in b.get_batch(timeout=0)] == [9]  # oldest first: it goes now
  assert b.stats().get("stale_dropped", 0) == 0 and b.stats()["batch_waits"] == 1


def test_a_group_over_the_cap_is_dropped_and_counted_by_domain_and_difficulty():
  b = buf_lib.StalenessBuffer(batch_size=1, max_staleness=0, max_token_staleness=1)
  b.restore(version=3, groups=[G(0, 1, "slow"), G(1, 3, "fast")])  # e.g. re-used after a resume
  assert [g.group_id for g in b.get_batch(timeout=0)] == [1]
  st = b.stats()
  assert st["stale_dropped"] == 1 and st["stale_dropped/slow"] == 1
  assert st["stale_dropped/difficulty/1"] == 1 and "stale_dropped/fast" not in st


def test_cap_below_eta_is_an_error():
  with pytest.raises(ValueError, match="max_staleness <= max_token_staleness"):
    buf_lib.StalenessBuffer(batch_size=2, max_staleness=3, max_token_staleness=2)
  with pytest.raises(ValueError, match="max_token_staleness 1 < max_staleness 2"):
    LoopConfig(mode="async", max_staleness=2, max_token_staleness=1)
  assert LoopConfig(mode="async", max_staleness=2).token_staleness == 4
  assert LoopConfig(mode="sync", max_staleness=2, max_token_staleness=5).token_staleness == 0


@pytest.mark.parametrize("eta,cap", [(1, 1), (2, 4)])
def test_every_trained_token_within_the_cap_and_slow_tasks_not_under_trained(tmp_path, eta, cap):
  loop = LoopConfig(mode="async", batch_groups=4, max_staleness=eta, max_token_staleness=cap)
  policy, buf, store, m = h.make(tmp_path, loop, seed=eta)
  steps = 60
  m.start()
  try:
    h.train(policy, buf, store, m, steps)
  finally:
    m.stop()
  batches = store.read_batches().to_pylist()
  rows = {r["trajectory_id"]: r for r in store.read().to_pylist()}
  assert len(batches) == steps * 4 * 2
  ids = [b["trajectory_id"] for b in batches]
  assert len(set(ids)) == len(ids)  # nothing trained twice
  worst, slow, asynchronous = 0, 0, False
  for b in batches:
    r = rows[b["trajectory_id"]]
    trained_at = b["step"] - 1  # the version the update that took it started from
    for v, mask in zip(r["versions"], r["loss_mask"], strict=True):
      if mask:
        worst = max(worst, trained_at - v)
    asynchronous |= len(set(r["versions"][1:])) > 1  # weights changed mid-episode
    slow += r["domain"] == "slow"
  assert worst <= cap  # the per-token rule, for every trained token
  assert worst >= 1 and asynchronous  # the schedule really was asynchronous
  assert buf.stats().get("stale_dropped", 0) == 0
  # Each task's share of trained trajectories vs its share of the pool (binomial, 3 sd).
  n, p = len(batches), len(h.SLOW) / h.POOL
  assert abs(slow / n - p) <= 3 * math.sqrt(p * (1 - p) / n), (slow, n)
  per_task = [sum(rows[i]["task_id"] == f"t{k}" for i in ids) for k in range(h.POOL)]
  for k, c in enumerate(per_task):
    assert abs(c / n - 1 / h.POOL) <= 3 * math.sqrt((1 / h.POOL) * (1 - 1 / h.POOL) / n), (k, c)
