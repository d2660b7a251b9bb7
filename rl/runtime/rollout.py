"""Rollout groups: G episodes of one task in real sandboxes, graded, stored, filtered, buffered.

Legend: G samples per task (group size), B groups per update.

`RolloutManager` runs a producer thread: while the buffer's admission rule allows
(`rl.runtime.buffer`), it takes the next work item (re-issued groups after a resume and retries first,
then fresh tasks from the task source), and runs the group's G episodes on a thread pool whose
concurrency the scheduler adapts. A finished group is written to the Parquet store (the
write-ahead log), then either put into the buffer or dropped:
  * infrastructure failure of an episode (sandbox died, engine error): the episode is retried
    up to `max_infra_retries` times in a fresh sandbox; if it still fails the whole group is
    masked out (never reward 0) and a replacement group starts;
  * dynamic sampling: a group whose rewards are all equal has zero advantage; it is dropped and
    replaced, up to `max_drop_factor * B` drops per policy version (then accepted as is, so a
    policy that always fails cannot stall training).
Group ids are issued in order; trajectory ids are `g<group_id>-s<sample>`, so a resumed run
re-issues exactly the groups that were in flight, with the same ids. A group already in the
store (finished after the last checkpoint, before a crash) is re-used, not re-run.

Prefetch (`prefetch_groups` > 0, with a `run_episode` that has `prepare(task)`, as
envs.episodes.SandboxEpisodes does): creating a task's sandbox and running its set-up script (an image
start, a build, a dependency install) uses no policy, so a prefetch thread does it for up to
`prefetch_groups` groups *before* they are admitted. Admission (AReaL's rule) then counts only
the policy-dependent part of an episode (generation, tools, grading), and a slow build no
longer holds a staleness slot. Prefetched groups already have their ids, so they are in the
checkpoint's in-flight list and a resumed run re-issues them. Synchronous runs admit prefetched
groups in issue order (the same sequence as without prefetch); asynchronous runs admit whichever
group's sandboxes are ready first. A sandbox that fails to set up is an infrastructure failure
of its episode's first attempt (retried in a fresh sandbox). Not on the Ray path.

Synchronous runs (staleness 0) decide in group-id order: a finished group waits until every
lower-id group that started has been decided. Which groups are dropped, replaced and trained
is then a function of the seed and the rewards, not of which episode happened to finish first,
so a resumed run trains on exactly the trajectories an uninterrupted one does. Asynchronous
runs decide on arrival (waiting for a slow group would stall the trainer they exist to feed).
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
import traceback

from envs.episodes import infra_outcome
from rl.config import RolloutConfig
from rl.runtime.buffer import BufferClosed, StalenessBuffer
from rl.runtime.records import Group, episode_row, episode_seed, trajectory_id
from rl.runtime.scheduler import ConcurrencyController, WorkQueue
from rl.runtime.trajectory_store import TrajectoryStore


def _spawn(fn, *args, name: str) -> concurrent.futures.Future:
  """Runs fn(*args) on a daemon thread (a stopping run never waits for slow episodes)."""
  fut: concurrent.futures.Future = concurrent.futures.Future()

  def run():
    try:
      fut.set_result(fn(*args))
    except BaseException as e:
      fut.set_exception(e)

  threading.Thread(target=run, name=name, daemon=True).start()
  return fut


def _discard(prepared) -> None:
  """Closes a prefetched task sandbox that will not be used (None and exceptions: nothing)."""
  if hasattr(prepared, "close"):
    try:
      prepared.close()
    except Exception:  # closing a sandbox nobody uses must not fail the run
      traceback.print_exc()


class RolloutManager:
  """Produces groups into a StalenessBuffer (see module docstring)."""

  def __init__(
    self,
    cfg: RolloutConfig,
    *,
    run_episode,
    tasks,
    buffer: StalenessBuffer,
    store: TrajectoryStore,
    on_event=None,
    next_group_id: int = 0,
  ):
    self.cfg, self.run_episode, self.tasks = cfg, run_episode, tasks
    self.buffer, self.store = buffer, store
    self.on_event = on_event or (lambda kind, **kw: None)
    high = cfg.buffer_high or 2 * buffer.batch_size
    self.controller = ConcurrencyController(
      min_concurrency=cfg.min_concurrency,
      max_concurrency=cfg.max_concurrency,
      low=cfg.buffer_low,
      high=high,
    )
    self.queue = WorkQueue()  # (group_id, task) re-issued after a resume: before fresh work
    self.lock = threading.RLock()  # guards next_group_id, inflight and the task source
    self.next_group_id = next_group_id
    self.inflight: dict[int, str] = {}  # group id -> task id
    self.in_order = buffer.max_staleness == 0  # decide in group-id order (module docstring)
    self._started: set[int] = set()  # group ids running or finished, not yet decided
    self._finished: dict[int, tuple] = {}  # group id -> (task, Group), awaiting its turn
    self.drops: dict[int, int] = {}  # policy version -> groups dropped for zero variance
    self._admitted: dict[int, int] = {}  # group id -> buffer version it was admitted at
    self._reissue_at: dict[int, int] = {}  # re-issued group id -> its original admission
    self.episode_stats: collections.deque = collections.deque()  # drained by the trainer
    self.masked_in_a_row = 0
    self._stop = threading.Event()
    self._errors: list[BaseException] = []
    self._thread = threading.Thread(target=self._produce, name="rollout-producer", daemon=True)
    self.prefetch = cfg.prefetch_groups if hasattr(run_episode, "prepare") else 0
    self._prepared: dict[int, tuple] = {}  # group id -> (task, [Future]), in issue order
    self._prep_cv = threading.Condition(self.lock)
    self._prefetcher = threading.Thread(target=self._prefetch, name="rollout-prefetch", daemon=True)

  # -- lifecycle ----------------------------------------------------------
  def start(self, reissue: dict[int, str] | None = None) -> None:
    """Starts producing; `reissue` (group id -> task id, from a checkpoint) goes first."""
    with self.lock:
      for gid, task_id in sorted((reissue or {}).items()):
        self.inflight[gid] = task_id
        self.queue.push((gid, self.tasks.get(task_id)), priority=float("inf"))
      self.buffer.expect(self._reissue_at.values())
    if self.prefetch:
      self._prefetcher.start()
    self._thread.start()

  def stop(self) -> None:
    self._stop.set()
    self.buffer.close()
    self.queue.close()
    if self._thread.ident is None:  # never started (a run with nothing left to train)
      return
    self._thread.join()
    if self.prefetch:
      self._prefetcher.join()
      with self.lock:
        pending, self._prepared = list(self._prepared.values()), {}
      for _, futs in pending:  # ready ones close here; the rest close themselves when done
        for f in futs:
          f.add_done_callback(lambda f: _discard(f.result()))
    # Running episodes are abandoned (daemon threads; nothing of theirs is stored after stop):
    # their groups are in the checkpoint's in-flight list and are re-issued on resume.

  @property
  def prefetched_ready(self) -> int:
    """Groups whose sandboxes are set up and waiting for admission."""
    with self.lock:
      return sum(all(f.done() for f in futs) for _, futs in self._prepared.values())

  def restore(self, snap: dict) -> dict[int, str]:
    """Takes back a `snapshot()` (before `start`); returns the groups to re-issue."""
    with self.lock:
      self.next_group_id = int(snap["next_group_id"])
      self.tasks.load_state_dict(snap["tasks"])
      self.drops = {int(k): v for k, v in snap.get("drops", {}).items()}
      self._reissue_at = {int(k): int(v) for k, v in snap.get("admitted", {}).items()}
    return {int(k): v for k, v in snap["inflight"].items()}

  def check(self) -> None:
    if self._errors:
      raise RuntimeError("rollout producer failed") from self._errors[0]

  def snapshot(self) -> dict:
    """In-flight accounting for a checkpoint (taken with the lock: consistent with the buffer)."""
    with self.lock:
      return {
        "next_group_id": self.next_group_id,
        "inflight": {str(k): v for k, v in self.inflight.items()},
        "buffer": [g.to_json() for g in self.buffer.items()],
        "tasks": self.tasks.state_dict(),
        "drops": {str(k): v for k, v in self.drops.items()},
        # admission versions of in-flight groups (a resume keeps their deadlines)
        "admitted": {
          str(k): v for k, v in {**self._reissue_at, **self._admitted}.items() if k in self.inflight
        },
      }

  # -- production ---------------------------------------------------------
  def _next_work(self, start: bool = True):
    """The next group to run: re-issued ones first, then fresh tasks by priority.

    Fresh group ids are issued `lookahead` at a time into the priority queue (a task's
    `metadata['priority']`, default 0; FIFO among equals). Issued groups count as in flight
    (they are in the checkpoint's re-issue list) from the moment they get their id.
    """
    with self.lock:
      if len(self.queue) == 0:
        for _ in range(max(1, self.cfg.lookahead)):
          gid = self.next_group_id
          self.next_group_id += 1
          task = self.tasks.task_for(gid)
          self.inflight[gid] = task.id
          self.queue.push((gid, task), priority=float(dict(task.metadata).get("priority", 0)))
      work = self.queue.pop(timeout=0)
      if start:
        self._started.add(work[0])
      return work

  def _produce(self) -> None:
    try:
      while not self._stop.is_set():
        admitted_at = self.buffer.admit_at(timeout=0.2)
        if admitted_at is None:
          continue
        if self.prefetch:
          gid, task, prepared = self._take_prepared()
        else:
          (gid, task), prepared = self._next_work(), None
        with self.lock:
          original = self._reissue_at.pop(gid, None)
          if original is not None:  # re-issued after a resume: its deadline is unchanged
            admitted_at = self.buffer.backdate(admitted_at, original)
          self._admitted[gid] = admitted_at
        _spawn(self._run_group_safe, gid, task, prepared, name=f"group-{gid}")
    except BufferClosed:
      pass
    except BaseException as e:  # surfaced to the trainer by check()
      self._errors.append(e)

  # -- prefetch (module docstring) ------------------------------------------
  def _prefetch(self) -> None:
    try:
      while not self._stop.is_set():
        with self._prep_cv:
          if len(self._prepared) >= self.prefetch:
            self._prep_cv.wait(0.2)
            continue
          gid, task = self._next_work(start=False)
          futs = [
            _spawn(self._prepare_one, task, name=f"prepare-{gid}-{s}")
            for s in range(self.cfg.group_size)
          ]
          self._prepared[gid] = (task, futs)
        for f in futs:
          f.add_done_callback(self._notify_prepared)
    except BaseException as e:
      self._errors.append(e)
      self.buffer.close()

  def _prepare_one(self, task):
    """A set-up task sandbox, or the exception that set-up raised (its episode's infra error)."""
    try:
      ts = self.run_episode.prepare(task)
    except Exception as e:
      return e
    if self._stop.is_set():
      _discard(ts)
      return None
    return ts

  def _notify_prepared(self, _fut) -> None:
    with self._prep_cv:
      self._prep_cv.notify_all()

  def _take_prepared(self):
    """An admitted group's prefetched sandboxes: the oldest (sync) or the first ready (async)."""
    with self._prep_cv:
      while not self._stop.is_set():
        ids = list(self._prepared)[:1] if self.in_order else list(self._prepared)
        ready = [g for g in ids if all(f.done() for f in self._prepared[g][1])]
        if ready:
          task, futs = self._prepared.pop(ready[0])
          self._started.add(ready[0])
          self._prep_cv.notify_all()
          return ready[0], task, [f.result() for f in futs]
        self._prep_cv.wait(0.2)
    raise BufferClosed()

  def _run_group_safe(self, gid: int, task, prepared=None) -> None:
    try:
      self._finish_group(gid, task, self._load_or_run(gid, task, prepared))
    except BufferClosed:
      pass
    except BaseException as e:
      traceback.print_exc()
      self._errors.append(e)
      self.buffer.close()

  def _load_or_run(self, gid: int, task, prepared=None) -> Group:
    prepared = prepared or [None] * self.cfg.group_size
    rows = self.store.read_group(gid)
    if (
      rows
      and rows[0]["task_id"] == task.id
      and len(rows) == self.cfg.group_size
      and not any(r["infra_error"] for r in rows)
    ):
      self.on_event("group_reused", group_id=gid)
      for p in prepared:
        _discard(p)
      return Group(gid, task.id, rows)
    futs = [
      _spawn(self._episode_with_retries, gid, task, s, prepared[s], name=f"episode-{gid}-{s}")
      for s in range(self.cfg.group_size)
    ]
    rows = [f.result() for f in futs]
    group = Group(gid, task.id, rows)
    if any(r["infra_error"] for r in rows):
      group.status = "infra"
    if self._stop.is_set():
      raise BufferClosed()  # stopping: this group stays in flight, to be re-issued
    self.store.write_group(rows)
    return group

  def _episode_with_retries(self, gid: int, task, sample: int, prepared=None) -> dict:
    for attempt in range(self.cfg.max_infra_retries + 1):
      seed = episode_seed(self.cfg.seed, gid, sample, attempt)
      with self.controller.semaphore:
        if self._stop.is_set():
          _discard(prepared)
          raise BufferClosed()
        kw = {} if prepared is None else {"prepared": prepared}
        prepared = None  # a retry sets up a fresh sandbox
        out = self._run_one(task, trajectory_id(gid, sample), seed, kw)
      if self._stop.is_set():
        raise BufferClosed()  # stopping: the engine and telemetry may already be closed
      row = episode_row(task, gid, sample, out)
      self.episode_stats.append(
        {"env_s": row["env_s"], "gen_s": row["gen_s"], "infra": bool(row["infra_error"])}
      )
      if not row["infra_error"]:
        return row
      self.on_event(
        "infra_error", trajectory_id=row["trajectory_id"], attempt=attempt, error=row["infra_error"]
      )
    return row

  def _run_one(self, task, tid: str, seed: int, kw: dict):
    """One episode; anything it raises is its infrastructure error (printed with its cause):
    one trajectory never aborts the run (a run of them does: max_masked_in_a_row)."""
    t0 = time.monotonic()
    try:
      return self.run_episode(task, tid, seed, **kw)
    except BufferClosed:
      raise
    except Exception as e:  # noqa: BLE001 - retried, then masked
      traceback.print_exc()
      return infra_outcome(tid, f"unexpected error: {type(e).__name__}: {e}", t0)

  def _finish_group(self, gid: int, task, group: Group) -> None:
    """Decides finished groups: on arrival, or (synchronous runs) in group-id order."""
    with self.lock:
      self._finished[gid] = (task, group)
      while self._finished:
        first = min(self._finished) if self.in_order else gid
        if self.in_order and first != min(self._started):
          return  # a lower-id group is still running: it is decided first
        t, g = self._finished.pop(first)
        self._started.discard(first)
        self.inflight.pop(first, None)
        self._decide(first, t, g)

  def _decide(self, gid: int, task, group: Group) -> None:
    """Masks (infra), drops (zero variance, within the budget) or buffers a group (lock held)."""
    at = self._admitted.pop(gid, None)
    if group.status == "infra":
      self.buffer.cancel("infra", at)
      self.on_event("group_masked", group_id=gid, task_id=task.id)
      self.masked_in_a_row += 1
      limit = self.cfg.max_masked_in_a_row
      if limit and self.masked_in_a_row >= limit:
        err = next(r["infra_error"] for r in group.rows if r["infra_error"])
        raise RuntimeError(f"{limit} groups in a row failed on infrastructure; last: {err}")
      return
    self.masked_in_a_row = 0
    rewards = group.rewards
    version = self.buffer.version
    cap = self.cfg.max_drop_factor * self.buffer.batch_size
    if (
      self.cfg.dynamic_sampling
      and max(rewards) == min(rewards)
      and self.drops.get(version, 0) < cap
    ):
      self.drops[version] = self.drops.get(version, 0) + 1
      group.status = "zero_variance"
      self.buffer.cancel("zero_variance", at)
      return
    self.buffer.put(group, at)
