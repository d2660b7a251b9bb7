"""The staleness buffer (AReaL admission rule), the scheduler and the Parquet trajectory store."""

import dataclasses
import random
import threading

import pytest

from rl.runtime import buffer as buf_lib
from rl.runtime import scheduler
from rl.runtime.trajectory_store import TrajectoryStore


@dataclasses.dataclass
class G:
  group_id: int
  min_version: int


def test_sync_admission_is_one_batch_per_version():
  b = buf_lib.StalenessBuffer(batch_size=3, max_staleness=0)
  assert [b.try_admit() for _ in range(4)] == [True, True, True, False]
  for i in range(3):
    b.put(G(i, 0))
  assert not b.try_admit()
  assert [g.group_id for g in b.get_batch()] == [0, 1, 2]
  b.set_version(1)
  assert [b.try_admit() for _ in range(4)] == [True, True, True, False]


def test_admission_formula_by_hand():
  # eta=2, B=4, version=1: accepted + running < (2 + 1 + 1) * 4 = 16.
  b = buf_lib.StalenessBuffer(batch_size=4, max_staleness=2)
  b.restore(version=1, groups=[G(i, 1) for i in range(5)])  # accepted = 4 + 5 = 9
  assert b.accepted == 9 and b.capacity() == 16
  admitted = sum(b.try_admit() for _ in range(20))
  assert admitted == 16 - 9
  b.cancel("zero_variance")  # a rejected group frees its slot: one replacement may start
  assert b.try_admit() and not b.try_admit()


def test_restore_applies_the_restart_rule():
  b = buf_lib.StalenessBuffer(batch_size=2, max_staleness=1)
  b.restore(version=5, groups=[G(0, 5)])
  assert (b.version, b.accepted, b.running) == (5, 11, 0)
  assert b.stats()["size"] == 1


def test_stale_groups_are_dropped_at_consumption_and_replaced():
  b = buf_lib.StalenessBuffer(batch_size=1, max_staleness=1)
  assert b.try_admit() and b.try_admit() and not b.try_admit()
  b.put(G(0, 0))
  b.put(G(1, 0))
  b.set_version(2)  # both are now 2 versions old
  assert b.get_batch(timeout=0.05) is None
  assert b.stats()["stale_dropped"] == 2 and b.accepted == 0
  assert b.try_admit()  # the dropped groups' slots went back to admission


def test_batches_take_the_oldest_policy_first():
  b = buf_lib.StalenessBuffer(batch_size=2, max_staleness=2)
  for i, v in enumerate([2, 1, 2, 0, 1]):  # arrival order, min_version
    assert b.try_admit()
    b.put(G(i, v))
  b.set_version(2)
  # oldest min_version first, arrival order among equals; the rest keep their order
  assert [g.group_id for g in b.get_batch()] == [3, 1]
  assert [g.group_id for g in b.items()] == [0, 2, 4]
  assert [g.group_id for g in b.get_batch()] == [4, 0]


def test_random_async_schedule_never_exceeds_the_bound():
  """Producers and a trainer at random speeds: every consumed group has staleness <= eta."""
  rng = random.Random(0)
  eta, B = 2, 3
  b = buf_lib.StalenessBuffer(batch_size=B, max_staleness=eta)
  next_id = iter(range(10**6))
  lock = threading.Lock()
  stop = threading.Event()

  def producer(seed):
    r = random.Random(seed)
    while not stop.is_set():
      try:
        if not b.admit(timeout=0.05):
          continue
      except buf_lib.BufferClosed:
        return
      start_version = b.version
      stop.wait(r.expovariate(1 / 0.002) * (10 if r.random() < 0.2 else 1))
      with lock:
        gid = next(next_id)
      if r.random() < 0.1:
        b.cancel("infra")
      else:
        b.put(G(gid, start_version))

  threads = [threading.Thread(target=producer, args=(i,)) for i in range(6)]
  for t in threads:
    t.start()
  seen = set()
  for v in range(40):
    batch = b.get_batch(timeout=10)
    assert batch is not None
    ids = [g.group_id for g in batch]
    assert not seen.intersection(ids)
    seen.update(ids)
    stop.wait(rng.random() * 0.004)
    b.set_version(v + 1)
  stop.set()
  b.close()
  for t in threads:
    t.join()
  assert len(b.consumed_staleness) == 40 * B
  assert max(b.consumed_staleness) <= eta
  assert max(b.consumed_staleness) >= 1  # the schedule really was asynchronous


def test_concurrency_controller_holds_buffer_between_bounds():
  c = scheduler.ConcurrencyController(
    min_concurrency=1, max_concurrency=4, low=2, high=5, initial=2
  )
  assert c.update(0) == 3 and c.update(1) == 4 and c.update(0) == 4  # capped at max
  assert c.update(3) == 4  # inside the band: unchanged
  assert c.update(9) == 3 and c.update(9) == 2 and c.update(9) == 1 and c.update(9) == 1


def test_resizable_semaphore_limits_holders():
  s = scheduler.ResizableSemaphore(2)
  assert s.acquire(0) and s.acquire(0) and not s.acquire(0.01)
  s.set_limit(3)
  assert s.acquire(0)
  s.set_limit(1)
  s.release()
  s.release()
  assert not s.acquire(0.01)  # 1 still held, limit 1
  s.release()
  assert s.acquire(0)


def test_work_queue_priority_then_fifo():
  q = scheduler.WorkQueue()
  for name, prio in [("a", 0), ("b", 0), ("retry", 5), ("c", 1)]:
    q.push(name, prio)
  assert [q.pop(0) for _ in range(4)] == ["retry", "c", "a", "b"]
  assert q.pop(0.01) is None


def _rows(gid, n=2):
  return [
    dict(
      trajectory_id=f"{gid}-{i}",
      group_id=gid,
      sample=i,
      task_id="t",
      tokens=[1, 2, 3],
      loss_mask=[0, 1, 1],
      logprobs=[0.0, -0.5, -0.25],
      versions=[-1, 3, 3],
      reward=float(i),
    )
    for i in range(n)
  ]


def test_store_round_trip_and_batches(tmp_path):
  st = TrajectoryStore(tmp_path)
  st.write_group(_rows(7))
  st.write_group(_rows(3))
  table = st.read(["trajectory_id", "group_id", "tokens", "reward"])
  assert sorted(table.column("trajectory_id").to_pylist()) == ["3-0", "3-1", "7-0", "7-1"]
  assert st.read_group(7)[1]["logprobs"] == [0.0, -0.5, -0.25]
  assert st.has_group(3) and not st.has_group(4) and st.read_group(4) is None
  st.write_batch(1, [dict(trajectory_id="3-0", group_id=3, staleness=0, replayed=False)])
  st.write_batch(2, [dict(trajectory_id="7-0", group_id=7, staleness=1, replayed=False)])
  st.write_batch(2, [dict(trajectory_id="7-1", group_id=7, staleness=1, replayed=False)])  # redo
  assert st.read_batches().column("trajectory_id").to_pylist() == ["3-0", "7-1"]
  st.discard_batches_after(1)
  assert st.read_batches().column("step").to_pylist() == [1]
  assert not list(tmp_path.rglob(".*.tmp"))


def test_store_rejects_bad_rows(tmp_path):
  st = TrajectoryStore(tmp_path)
  with pytest.raises(ValueError, match="unknown columns"):
    st.write_group([dict(trajectory_id="x", group_id=1, bogus=1)])
  with pytest.raises(ValueError, match="several group ids"):
    st.write_group(_rows(1) + _rows(2))
