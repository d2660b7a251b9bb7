"""A bounded, staleness-tagged buffer of rollout groups with AReaL's admission rule.

The unit is a *group*: the G episodes of one task (GRPO's advantage needs the whole group).
`batch_size` is the number of groups one update consumes. With trainer version v (updates
done) and staleness bound eta, a new group may start only while

    accepted + running < (eta + v + 1) * batch_size

(AReaL). eta = 0 is synchronous RL. A group's staleness when consumed is
`v - min_version`, where `min_version` is the oldest policy version among its tokens.

Policy for in-flight groups that become stale: the engine hot-swaps weights, so running
episodes continue with the newest policy (each token carries its version and decoupled PPO
corrects for it). Admission bounds staleness by start version; because slow groups can still
finish late, a batch takes the groups with the oldest `min_version` first (so a group near
the bound is trained before it expires), and the buffer checks again when handing out a batch
and drops any group with staleness > eta (counted in `stats()['stale_dropped']`); dropping frees its admission slot, so
a replacement is started. No consumed group ever exceeds eta.

Restart rule (AReaL): on restore `accepted = version * batch_size` plus the groups restored
into the buffer; `running` restarts at 0 and re-issued in-flight groups are admitted again.
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


class StalenessBuffer:
  """Thread-safe FIFO of finished groups plus the admission accounting."""

  def __init__(self, batch_size: int, max_staleness: int = 0):
    if batch_size <= 0 or max_staleness < 0:
      raise ValueError(
        f"batch_size must be > 0 and max_staleness >= 0, got {batch_size}, {max_staleness}"
      )
    self.batch_size = batch_size
    self.max_staleness = max_staleness
    self.version = 0
    self.accepted = 0  # groups put into the buffer since the run began (consumed included)
    self.running = 0  # groups admitted and not yet put or cancelled
    self._items: collections.deque = collections.deque()
    self._cv = threading.Condition()
    self._closed = False
    self._counts = collections.Counter()
    self.consumed_staleness: list[int] = []  # one entry per consumed group, for the histogram

  # -- admission ----------------------------------------------------------
  def capacity(self) -> int:
    return (self.max_staleness + self.version + 1) * self.batch_size

  def try_admit(self) -> bool:
    with self._cv:
      if self._closed or self.accepted + self.running >= self.capacity():
        return False
      self.running += 1
      return True

  def admit(self, timeout: float | None = None) -> bool:
    """Blocks until a new group may start; False on timeout; raises BufferClosed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with self._cv:
      while True:
        if self._closed:
          raise BufferClosed()
        if self.accepted + self.running < self.capacity():
          self.running += 1
          return True
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
          return False
        self._cv.wait(left)

  def cancel(self, reason: str = "cancelled") -> None:
    """An admitted group will not be put (infra failure, zero variance): frees its slot."""
    with self._cv:
      self.running -= 1
      self._counts[reason] += 1
      self._cv.notify_all()

  def put(self, group: GroupLike) -> None:
    with self._cv:
      self.running -= 1
      self.accepted += 1
      self._items.append(group)
      self._counts["put"] += 1
      self._cv.notify_all()

  # -- consumption --------------------------------------------------------
  def _drop_stale(self) -> None:
    keep = collections.deque()
    for g in self._items:
      if self.version - g.min_version > self.max_staleness:
        self.accepted -= 1  # its slot goes back to admission: a replacement starts
        self._counts["stale_dropped"] += 1
      else:
        keep.append(g)
    self._items = keep

  def get_batch(self, n: int | None = None, timeout: float | None = None) -> list | None:
    """Blocks until `n` (default batch_size) groups are ready; pops the n with the oldest
    min_version (FIFO among equals). None on timeout."""
    n = n or self.batch_size
    deadline = None if timeout is None else time.monotonic() + timeout
    with self._cv:
      while True:
        self._drop_stale()
        if len(self._items) >= n:
          # oldest policy first (stable: FIFO among equals), so groups near the bound are
          # trained before they expire; sync runs (all one version) stay FIFO
          order = sorted(range(len(self._items)), key=lambda i: self._items[i].min_version)
          batch = [self._items[i] for i in order[:n]]
          self._items = collections.deque(self._items[i] for i in sorted(order[n:]))
          self.consumed_staleness += [self.version - g.min_version for g in batch]
          self._cv.notify_all()
          return batch
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
        **self._counts,
      }

  def restore(self, version: int, groups: list) -> None:
    """Restart rule: accepted = version * batch_size, then the restored groups re-enter."""
    with self._cv:
      self.version = version
      self.accepted = version * self.batch_size + len(groups)
      self.running = 0
      self._items = collections.deque(groups)
      self._cv.notify_all()
