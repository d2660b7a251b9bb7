"""Balancing rollout and training: adaptive rollout concurrency and a priority queue of work.

`ConcurrencyController` holds the buffer between `low` and `high` groups: below `low` (the
trainer is starving) it raises the number of episodes allowed to run at once; above `high`
(rollouts outpace training, and data goes stale) it lowers it. The limit is enforced by a
`ResizableSemaphore` the rollout workers acquire per episode.

`WorkQueue` orders pending groups by priority (higher first, then FIFO): re-issued groups
after a resume and retries of infrastructure failures jump ahead of fresh tasks, and a task's
own `priority` (from its metadata) orders fresh work.
"""

from __future__ import annotations

import heapq
import itertools
import threading


class ResizableSemaphore:
  """A counting semaphore whose limit can change while permits are held."""

  def __init__(self, limit: int):
    self._limit = limit
    self._held = 0
    self._cv = threading.Condition()

  @property
  def limit(self) -> int:
    return self._limit

  @property
  def held(self) -> int:
    return self._held

  def set_limit(self, limit: int) -> None:
    with self._cv:
      self._limit = max(1, limit)
      self._cv.notify_all()

  def acquire(self, timeout: float | None = None) -> bool:
    with self._cv:
      ok = self._cv.wait_for(lambda: self._held < self._limit, timeout)
      if ok:
        self._held += 1
      return ok

  def release(self) -> None:
    with self._cv:
      self._held -= 1
      self._cv.notify_all()

  def __enter__(self):
    self.acquire()
    return self

  def __exit__(self, *exc):
    self.release()
    return False


class ConcurrencyController:
  """Additive-increase / additive-decrease of the concurrent-episode limit from buffer size."""

  def __init__(
    self,
    *,
    min_concurrency: int,
    max_concurrency: int,
    low: int,
    high: int,
    initial: int | None = None,
    step: int = 1,
  ):
    if not 1 <= min_concurrency <= max_concurrency:
      raise ValueError(
        f"need 1 <= min_concurrency <= max_concurrency, got {min_concurrency}, {max_concurrency}"
      )
    if not 0 <= low <= high:
      raise ValueError(f"need 0 <= low <= high buffer bounds, got {low}, {high}")
    self.min, self.max, self.low, self.high, self.step = (
      min_concurrency,
      max_concurrency,
      low,
      high,
      step,
    )
    self.semaphore = ResizableSemaphore(initial if initial is not None else max_concurrency)
    self.history: list[int] = []

  @property
  def limit(self) -> int:
    return self.semaphore.limit

  def update(self, buffer_size: int) -> int:
    """Call when the trainer takes a batch (or periodically); returns the new limit."""
    limit = self.limit
    if buffer_size < self.low:
      limit = min(self.max, limit + self.step)
    elif buffer_size > self.high:
      limit = max(self.min, limit - self.step)
    self.semaphore.set_limit(limit)
    self.history.append(limit)
    return limit


class WorkQueue:
  """Thread-safe priority queue: higher priority first, FIFO within a priority."""

  def __init__(self):
    self._heap: list = []
    self._seq = itertools.count()
    self._cv = threading.Condition()
    self._closed = False

  def push(self, item, priority: float = 0.0) -> None:
    with self._cv:
      heapq.heappush(self._heap, (-priority, next(self._seq), item))
      self._cv.notify()

  def pop(self, timeout: float | None = None):
    """The highest-priority item, or None on timeout / when closed and empty."""
    with self._cv:
      self._cv.wait_for(lambda: self._heap or self._closed, timeout)
      if not self._heap:
        return None
      return heapq.heappop(self._heap)[2]

  def items(self) -> list:
    with self._cv:
      return [it for _, _, it in sorted(self._heap)]

  def close(self) -> None:
    with self._cv:
      self._closed = True
      self._cv.notify_all()

  def __len__(self) -> int:
    with self._cv:
      return len(self._heap)
