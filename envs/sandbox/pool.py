"""A pool of pre-warmed sandboxes per spec: grows with demand, shrinks when idle, never leaks.

  pool = SandboxPool(SandboxSpec(), PoolConfig(backend="bwrap", min_idle=2, max_live=16))
  with pool.sandbox() as sb:          # a fresh, healthy sandbox (never one used before)
    sb.exec("pytest -q")
  pool.close()                        # also done at exit, on SIGINT and on SIGTERM

A background thread keeps `target` idle sandboxes per spec ready: the target starts at
`min_idle`, grows by one each time an acquire finds none ready (up to `max_idle`) and decays
back after `idle_ttl_s` without misses. Creation goes through a token bucket
(`create_rate`/s, burst `create_burst`) and retries infrastructure errors with exponential
backoff; a creation that still fails raises SandboxError from `acquire` (the caller must treat
it as an infrastructure error, never as a task failure). Idle sandboxes are probed with
`exec("true")` every `health_every_s` and replaced when dead. Released sandboxes are closed in
the background, so the caller does not wait for teardown.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable

from envs import sandbox as sandbox_lib
from envs.sandbox import common
from envs.sandbox.base import Sandbox, SandboxError, SandboxSpec


@dataclasses.dataclass(frozen=True)
class PoolConfig:
  backend: str = "bwrap"
  min_idle: int = 1  # warm sandboxes kept ready per spec
  max_idle: int = 8  # the warm target never grows beyond this
  max_live: int = 32  # leased + idle + being created, all specs together
  max_leased: int | None = None  # concurrency cap on leased sandboxes (default: max_live)
  create_rate: float = 20.0  # creations per second (token bucket)
  create_burst: int = 4
  retries: int = 3  # infrastructure errors retried this many times per creation
  backoff_s: float = 0.2  # first retry delay, doubled each time
  backoff_max_s: float = 5.0
  idle_ttl_s: float = 60.0  # an idle sandbox above the target is closed after this
  health_every_s: float = 30.0
  acquire_timeout_s: float = 300.0
  options: tuple[tuple[str, object], ...] = ()  # backend options, e.g. (("cgroup_mode", "v1"),)


class _Bucket:
  """Token bucket: `rate` tokens/s, at most `burst` saved up."""

  def __init__(self, rate: float, burst: int, clock: Callable[[], float]):
    self.rate, self.burst, self.clock = rate, burst, clock
    self.tokens, self.t = float(burst), clock()

  def wait_s(self) -> float:
    """Takes a token and returns 0, or returns how long until one is available."""
    now = self.clock()
    self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
    self.t = now
    if self.tokens >= 1:
      self.tokens -= 1
      return 0.0
    return (1 - self.tokens) / self.rate


@dataclasses.dataclass
class _Sub:
  spec: SandboxSpec
  target: int
  idle: collections.deque = dataclasses.field(default_factory=collections.deque)
  starting: int = 0
  last_miss: float = 0.0


class SandboxPool:
  def __init__(
    self,
    spec: SandboxSpec | None = None,
    config: PoolConfig | None = None,
    clock: Callable[[], float] = time.monotonic,
  ):
    self.config, self.clock = config or PoolConfig(), clock
    self.default_spec = spec or SandboxSpec()
    self._cv = threading.Condition()
    self._subs: dict[SandboxSpec, _Sub] = {}
    self._leased: set[Sandbox] = set()
    self._bucket = _Bucket(self.config.create_rate, self.config.create_burst, clock)
    self._closed = False
    keys = ("created", "create_errors", "retries", "leases", "misses", "unhealthy", "shrunk")
    self.stats = collections.Counter(dict.fromkeys(keys, 0))
    self._sub(self.default_spec)
    common.on_teardown(self.close)
    self._thread = threading.Thread(target=self._maintain, name="agentrl-pool", daemon=True)
    self._thread.start()

  # --- public -------------------------------------------------------------------------------

  def acquire(self, spec: SandboxSpec | None = None, timeout_s: float | None = None) -> Sandbox:
    """A fresh healthy sandbox for `spec`; SandboxError if none can be had in time."""
    end = time.monotonic() + (timeout_s or self.config.acquire_timeout_s)
    cap = self.config.max_leased or self.config.max_live
    with self._cv:
      sub = self._sub(spec or self.default_spec)
      while True:
        if self._closed:
          raise SandboxError("the sandbox pool is closed")
        if len(self._leased) < cap:
          while sub.idle:
            sb, _, _ = sub.idle.popleft()
            if sb.alive:
              return self._lease(sb)
            self._discard(sb, "dead_idle")
          sub.last_miss = self.clock()
          sub.target = min(self.config.max_idle, max(sub.target, self.config.min_idle) + 1)
          self.stats["misses"] += 1
          if self._live() < self.config.max_live:
            sub.starting += 1
            break
        left = end - time.monotonic()
        if left <= 0:
          raise SandboxError(f"no sandbox within the acquire timeout ({self.stats_dict()})")
        self._cv.wait(min(left, 0.5))
    try:
      sb = self._create(sub.spec)
    finally:
      with self._cv:
        sub.starting -= 1
    with self._cv:
      return self._lease(sb)

  def release(self, sb: Sandbox) -> None:
    """Returns a leased sandbox: it is closed in the background (sandboxes are never reused)."""
    with self._cv:
      self._leased.discard(sb)
      self._cv.notify_all()
    threading.Thread(target=common.close_quietly, args=(sb,), daemon=True).start()

  @contextlib.contextmanager
  def sandbox(self, spec: SandboxSpec | None = None):
    sb = self.acquire(spec)
    try:
      yield sb
    finally:
      self.release(sb)

  def stats_dict(self) -> dict:
    with self._cv:
      idle = sum(len(s.idle) for s in self._subs.values())
      starting = sum(s.starting for s in self._subs.values())
      target = sum(s.target for s in self._subs.values())
      return dict(self.stats, leased=len(self._leased), idle=idle, starting=starting, target=target)

  def close(self) -> None:
    """Closes every sandbox of the pool, leased ones included; idempotent."""
    with self._cv:
      if self._closed:
        return
      self._closed = True
      boxes = [sb for s in self._subs.values() for sb, _, _ in s.idle] + list(self._leased)
      for s in self._subs.values():
        s.idle.clear()
      self._leased.clear()
      self._cv.notify_all()
    threads = [threading.Thread(target=common.close_quietly, args=(b,)) for b in boxes]
    for t in threads:
      t.start()
    for t in threads:
      t.join(timeout=60)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False

  # --- internals ------------------------------------------------------------------------------

  def _sub(self, spec: SandboxSpec) -> _Sub:
    if spec not in self._subs:
      self._subs[spec] = _Sub(spec, self.config.min_idle)
    return self._subs[spec]

  def _live(self) -> int:
    per = sum(len(s.idle) + s.starting for s in self._subs.values())
    return per + len(self._leased)

  def _lease(self, sb: Sandbox) -> Sandbox:
    self._leased.add(sb)
    self.stats["leases"] += 1
    self._cv.notify_all()
    return sb

  def _discard(self, sb: Sandbox, why: str) -> None:
    self.stats[why] += 1
    threading.Thread(target=common.close_quietly, args=(sb,), daemon=True).start()

  def _create(self, spec: SandboxSpec) -> Sandbox:
    """One sandbox, rate-limited, with retries and backoff on infrastructure errors."""
    delay, last = self.config.backoff_s, None
    for attempt in range(self.config.retries + 1):
      while (wait := self._take_token()) > 0:
        time.sleep(wait)
      if self._closed:
        raise SandboxError("the sandbox pool is closed")
      try:
        sb = sandbox_lib.make(self.config.backend, spec, **dict(self.config.options))
        self.stats["created"] += 1
        return sb
      except SandboxError as e:
        last = e
        self.stats["create_errors"] += 1
        if attempt < self.config.retries:
          self.stats["retries"] += 1
          time.sleep(delay)
          delay = min(delay * 2, self.config.backoff_max_s)
    raise SandboxError(f"sandbox creation failed {self.config.retries + 1} times: {last}") from last

  def _take_token(self) -> float:
    with self._cv:
      return self._bucket.wait_s()

  def _maintain(self) -> None:
    while True:
      with self._cv:
        if self._closed:
          return
        work = self._plan()
      for kind, sub, item in work:
        if kind == "create":
          self._warm(sub)
        elif kind == "probe":
          self._probe(sub, item)
      with self._cv:
        if not work:
          self._cv.wait(0.05)

  def _plan(self) -> list:
    """What to do next (with the lock held): shrink, probe, grow."""
    now, work = self.clock(), []
    for sub in self._subs.values():
      if sub.target > self.config.min_idle and now - sub.last_miss > self.config.idle_ttl_s:
        sub.target -= 1
        sub.last_miss = now  # decay one step per ttl
      while len(sub.idle) > sub.target and now - sub.idle[0][1] > self.config.idle_ttl_s:
        sb, _, _ = sub.idle.popleft()
        self._discard(sb, "shrunk")
      for i, (sb, since, checked) in enumerate(sub.idle):
        if now - checked > self.config.health_every_s:
          del sub.idle[i]
          sub.starting += 1  # busy: counts as live while probed
          work.append(("probe", sub, (sb, since)))
          break
      if len(sub.idle) + sub.starting < sub.target and self._live() < self.config.max_live:
        sub.starting += 1
        work.append(("create", sub, None))
    return work

  def _warm(self, sub: _Sub) -> None:
    try:
      sb = self._create(sub.spec)
    except SandboxError:
      sb = None  # counted in stats; acquire() will retry and report
    with self._cv:
      sub.starting -= 1
      if sb is not None and self._closed:
        self._discard(sb, "closed_pool")
      elif sb is not None:
        sub.idle.append((sb, self.clock(), self.clock()))
        self._cv.notify_all()

  def _probe(self, sub: _Sub, item) -> None:
    sb, since = item
    try:
      ok = sb.alive and sb.exec("true", timeout_s=30).exit_code == 0
    except SandboxError:
      ok = False
    with self._cv:
      sub.starting -= 1
      if ok and not self._closed:
        sub.idle.append((sb, since, self.clock()))
      else:
        self._discard(sb, "unhealthy" if not ok else "closed_pool")
