"""A bounded, staleness-tagged buffer of rollout groups: AReaL's admission rule, a per-token bound.

The unit is a *group*: the G episodes of one task (GRPO's advantage needs the whole group).
`batch_size` is the number of groups one update consumes. With trainer version v (updates
done) and admission bound eta, a new group may start only while

    accepted + running < (eta + v + 1) * batch_size

(AReaL). eta = 0 is synchronous RL.

Per-token staleness. Weights change under running episodes (in-flight updates: every token
records the policy version that produced it and its behaviour log-prob, and decoupled PPO
weights it). A trajectory's staleness when trained at version v is `v - oldest token version`
(its `min_version`; a group's is its oldest trajectory's), so no trained token is older than
that. The hard cap `max_token_staleness` (>= eta) bounds it:

  * a batch takes the groups with the oldest `min_version` first (earliest deadline first);
  * the trainer *waits* for a running group that must be trained now or never (admitted at a
    version <= v - cap: its admission version is a lower bound of its oldest token), instead
    of training past it and dropping it. Admission puts at most (eta + u + 1) * B groups at
    versions <= u, and by version u + cap the trainer has taken (u + cap + 1) * B, so with
    cap >= eta the count leaves room for every group before its deadline (the async suite,
    tests/test_async_*.py, checks that none is dropped under random durations);
  * only a group already over the cap when put (a finished group re-used from the store after
    a resume, an admission the buffer could not track) is dropped: counted in
    `stats()['stale_dropped']` and per domain / difficulty (`stale_dropped/<domain>`,
    `stale_dropped/difficulty/<d>`), so any residual bias against slow tasks is visible.
    Dropping frees its admission slot, so a replacement starts. No trained group exceeds the cap.

Restart rule (AReaL): on restore `accepted = version * batch_size` plus the groups restored
into the buffer; `running` restarts at 0 and re-issued in-flight groups are admitted again,
keeping their original admission version (`expect` / `backdate`: a group re-used from the
store holds tokens that old, so its deadline is unchanged by the crash).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Protocol


class GroupLike(Protocol):
  group_id: int

  @property
  def min_version(self) -> int: ...


class BufferClosed(RuntimeError):
  pass


def _tags(group) -> list[str]:
  """Count keys of a dropped group: its domain and difficulty (when it has rows)."""
  rows = getattr(group, "rows", None) or [{}]
  out = [f"stale_dropped/{rows[0].get('domain', 'unknown')}"]
  if "difficulty" in rows[0]:
    out.append(f"stale_dropped/difficulty/{rows[0]['difficulty']}")
  return out


class StalenessBuffer:
  """Thread-safe buffer of finished groups plus the admission accounting."""

  def __init__(self, batch_size: int, max_staleness: int = 0, max_token_staleness: int = -1):
    cap = max_staleness if max_token_staleness < 0 else max_token_staleness
    if batch_size <= 0 or max_staleness < 0 or cap < max_staleness:
      raise ValueError(
        "need batch_size > 0 and 0 <= max_staleness <= max_token_staleness, got "
        f"{batch_size}, {max_staleness}, {max_token_staleness}"
      )
    self.batch_size = batch_size
    self.max_staleness = max_staleness
    self.cap = cap  # hard cap on a trained trajectory's staleness (module docstring)
    self.version = 0
    self.accepted = 0  # groups put into the buffer since the run began (consumed included)
    self.running = 0  # groups admitted and not yet put or cancelled
    self._running_at = collections.Counter()  # admission version -> running groups
    self._expected_at = collections.Counter()  # re-issued after a resume, not yet re-admitted
    self._items: collections.deque = collections.deque()
    self._cv = threading.Condition()
    self._closed = False
    self._counts = collections.Counter()
    self.consumed_staleness: list[int] = []  # one entry per consumed group, for the histogram
    self.waits = 0  # batches held back for a group that would otherwise expire

  # -- admission ----------------------------------------------------------
  def capacity(self) -> int:
    return (self.max_staleness + self.version + 1) * self.batch_size

  def _take_slot(self) -> int:
    self.running += 1
    self._running_at[self.version] += 1
    return self.version

  def _free_slot(self, admitted_at: int | None) -> None:
    self.running -= 1
    at = admitted_at
    if at is None or not self._running_at[at]:
      # untracked: free the oldest (the trainer never waits for a group that is gone;
      # the drop check at consumption still enforces the cap)
      at = min((v for v, n in self._running_at.items() if n), default=None)
    if at is not None:
      self._running_at[at] -= 1
      if not self._running_at[at]:
        del self._running_at[at]

  def expect(self, versions) -> None:
    """Groups re-issued after a resume, by their original admission version: counted as
    running at that version (the trainer waits for them near the cap) until re-admitted."""
    with self._cv:
      self._expected_at.update(versions)

  def backdate(self, admitted_at: int, original: int) -> int:
    """A re-issued group was re-admitted at `admitted_at`: it keeps its original admission
    version (its re-used tokens may be that old). Returns the version to put/cancel with."""
    with self._cv:
      if self._expected_at[original]:
        self._expected_at[original] -= 1
      self._expected_at += collections.Counter()  # drops zero counts
      at = min(admitted_at, original)
      if at != admitted_at and self._running_at[admitted_at]:
        self._running_at[admitted_at] -= 1
        self._running_at[at] += 1
        self._running_at += collections.Counter()
      self._cv.notify_all()
      return at

  def try_admit(self) -> bool:
    with self._cv:
      if self._closed or self.accepted + self.running >= self.capacity():
        return False
      self._take_slot()
      return True

  def admit(self, timeout: float | None = None) -> bool:
    """Blocks until a new group may start; False on timeout; raises BufferClosed."""
    return self.admit_at(timeout) is not None

  def admit_at(self, timeout: float | None = None) -> int | None:
    """As admit(), but returns the admission version (give it back to put/cancel)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with self._cv:
      while True:
        if self._closed:
          raise BufferClosed()
        if self.accepted + self.running < self.capacity():
          return self._take_slot()
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
          return None
        self._cv.wait(left)

  def cancel(self, reason: str = "cancelled", admitted_at: int | None = None) -> None:
    """An admitted group will not be put (infra failure, zero variance): frees its slot."""
    with self._cv:
      self._free_slot(admitted_at)
      self._counts[reason] += 1
      self._cv.notify_all()

  def put(self, group: GroupLike, admitted_at: int | None = None) -> None:
    with self._cv:
      self._free_slot(admitted_at)
      self.accepted += 1
      self._items.append(group)
      self._counts["put"] += 1
      self._cv.notify_all()

  # -- consumption --------------------------------------------------------
  def _drop_stale(self) -> None:
    keep = collections.deque()
    for g in self._items:
      if self.version - g.min_version > self.cap:
        self.accepted -= 1  # its slot goes back to admission: a replacement starts
        self._counts["stale_dropped"] += 1
        self._counts.update(_tags(g))
      else:
        keep.append(g)
    self._items = keep

  def get_batch(self, n: int | None = None, timeout: float | None = None) -> list | None:
    """Blocks until `n` (default batch_size) groups are ready and no running group would
    expire by waiting one more version; pops the n with the oldest min_version (FIFO among
    equals). None on timeout."""
    n = n or self.batch_size
    deadline = None if timeout is None else time.monotonic() + timeout
    with self._cv:
      waited = False
      while True:
        self._drop_stale()
        expiring = any(
          at <= self.version - self.cap for at in (*self._running_at, *self._expected_at)
        )
        if len(self._items) >= n and not expiring:
          # oldest policy first (stable: FIFO among equals), so groups near the cap are
          # trained before they expire; sync runs (all one version) stay FIFO
          order = sorted(range(len(self._items)), key=lambda i: self._items[i].min_version)
          batch = [self._items[i] for i in order[:n]]
          self._items = collections.deque(self._items[i] for i in sorted(order[n:]))
          self.consumed_staleness += [self.version - g.min_version for g in batch]
          self._cv.notify_all()
          return batch
        if not waited and len(self._items) >= n:  # held back only by an expiring group
          self.waits += 1
          waited = True
        if self._closed:
          raise BufferClosed()
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
          return None
        self._cv.wait(left if left is not None else 1.0)

  def set_version(self, version: int) -> None:
    """The trainer finished an update: more groups may start."""
    with self._cv:
      self.version = version
      self._cv.notify_all()

  def close(self) -> None:
    with self._cv:
      self._closed = True
      self._cv.notify_all()

  # -- introspection and restore -----------------------------------------
  def __len__(self) -> int:
    with self._cv:
      return len(self._items)

  def items(self) -> list:
    with self._cv:
      return list(self._items)

  def stats(self) -> dict:
    with self._cv:
      return {
        "size": len(self._items),
        "running": self.running,
        "accepted": self.accepted,
        "capacity": self.capacity(),
        "version": self.version,
        "cap": self.cap,
        "batch_waits": self.waits,
        **self._counts,
      }

  def restore(self, version: int, groups: list) -> None:
    """Restart rule: accepted = version * batch_size, then the restored groups re-enter."""
    with self._cv:
      self.version = version
      self.accepted = version * self.batch_size + len(groups)
      self.running = 0
      self._running_at.clear()
      self._items = collections.deque(groups)
      self._cv.notify_all()
