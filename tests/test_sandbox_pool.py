"""The sandbox pool: warm sandboxes, demand-driven growth and decay, caps, rate limit, retries,
health checks and teardown. Pool logic is backend-independent, so it runs on bubblewrap (plus
one Docker smoke test); a controllable clock drives the time-based decisions."""

from __future__ import annotations

import os
import signal
import time

import pytest

from envs import sandbox as sandbox_lib
from envs.sandbox import testing
from envs.sandbox.pool import PoolConfig, SandboxPool, _Bucket

backend, sandbox_image = testing.backend, testing.sandbox_image  # fixtures


class Clock:
  def __init__(self):
    self.t = 1000.0

  def __call__(self) -> float:
    return self.t


def _until(pred, what: str, timeout_s: float = 120.0):
  end = time.monotonic() + timeout_s
  while not pred():
    assert time.monotonic() < end, f"timed out waiting for {what}"
    time.sleep(0.05)


def test_token_bucket_by_hand():
  clock = Clock()
  b = _Bucket(rate=2.0, burst=2, clock=clock)
  assert [b.wait_s(), b.wait_s()] == [0.0, 0.0]  # the burst
  assert b.wait_s() == pytest.approx(0.5)  # empty: one token per 1/rate s
  clock.t += 0.25
  assert b.wait_s() == pytest.approx(0.25)
  clock.t += 0.25
  assert b.wait_s() == 0.0
  clock.t += 100.0
  assert [b.wait_s(), b.wait_s(), b.wait_s() > 0] == [0.0, 0.0, True]  # capped at the burst


def test_prewarm_grow_shrink_and_teardown(sandbox_image):
  before = testing.leak_probe()
  clock = Clock()
  cfg = PoolConfig(min_idle=1, max_idle=3, create_burst=100, idle_ttl_s=10.0, health_every_s=1e9)
  pool = SandboxPool(config=cfg, clock=clock)
  _until(lambda: pool.stats_dict()["idle"] == 1, "the warm sandbox")
  a = pool.acquire()
  assert pool.stats_dict()["misses"] == 0  # it was warm
  assert a.exec("echo hi").stdout == "hi\n"
  b, c = pool.acquire(), pool.acquire()  # demand beyond the warm set
  assert pool.stats_dict()["misses"] >= 1
  _until(lambda: pool.stats_dict()["idle"] >= 2, "growth after misses")
  assert pool.stats_dict()["idle"] <= cfg.max_idle
  for sb in (a, b, c):
    pool.release(sb)
  _until(lambda: not (a.alive or b.alive or c.alive), "released sandboxes closing")
  while (target := pool.stats_dict()["target"]) > cfg.min_idle:  # no misses: it decays
    clock.t += cfg.idle_ttl_s + 1  # one step per ttl, seen by the pool's thread
    _until(lambda t=target: pool.stats_dict()["target"] < t, "the warm target decaying")
  _until(lambda: pool.stats_dict()["idle"] == cfg.min_idle, "shrinking to min_idle")
  held = pool.acquire()
  pool.close()
  assert not held.alive
  with pytest.raises(sandbox_lib.SandboxError):
    pool.acquire()
  _until(lambda: not testing.new_leaks(before, testing.leak_probe()), "no leftovers", 60)


def test_concurrency_cap_and_live_cap(sandbox_image):
  with SandboxPool(config=PoolConfig(min_idle=0, max_leased=2, max_live=3)) as pool:
    a, b = pool.acquire(), pool.acquire()
    with pytest.raises(sandbox_lib.SandboxError, match="acquire timeout"):
      pool.acquire(timeout_s=1.0)
    pool.release(a)
    c = pool.acquire(timeout_s=60)
    assert c.exec("true").exit_code == 0
    assert pool.stats_dict()["leased"] == 2
    del b


def test_live_cap_bounds_leased_idle_and_starting_together(sandbox_image):
  """max_live counts every sandbox (leased + idle + being created): with a leased cap above
  it, the live cap alone refuses the fourth acquire, and the warm-up never overshoots it."""
  cfg = PoolConfig(min_idle=2, max_idle=4, max_live=3, max_leased=5)
  with SandboxPool(config=cfg) as pool:
    held = [pool.acquire(timeout_s=60) for _ in range(3)]
    with pytest.raises(sandbox_lib.SandboxError, match="acquire timeout"):
      pool.acquire(timeout_s=1.0)
    for _ in range(20):  # the maintenance thread wants 2 idle on top: the cap holds it at 0
      st = pool.stats_dict()
      assert st["leased"] + st["idle"] + st["starting"] <= 3, st
      time.sleep(0.05)
    pool.release(held.pop())
    assert pool.acquire(timeout_s=60).exec("true").exit_code == 0


class _Flaky:
  """A backend whose first `fail` creations raise an infrastructure error (fault injection
  around the real bubblewrap backend)."""

  def __init__(self, fail: int, exc=sandbox_lib.SandboxError):
    self.fail, self.exc, self.calls = fail, exc, 0

  def __call__(self, spec, **kw):
    self.calls += 1
    if self.calls <= self.fail:
      raise self.exc("injected: daemon unavailable")
    return sandbox_lib.BACKENDS["bwrap"](spec, **kw)


def test_infrastructure_errors_are_retried_with_backoff(sandbox_image):
  sandbox_lib.register("flaky2", _Flaky(2))
  cfg = PoolConfig(backend="flaky2", min_idle=0, retries=3, backoff_s=0.01)
  with SandboxPool(config=cfg) as pool:
    sb = pool.acquire()
    assert sb.exec("echo ok").stdout == "ok\n"
    assert pool.stats_dict()["create_errors"] == 2 and pool.stats_dict()["retries"] == 2

  sandbox_lib.register("flaky9", _Flaky(9))
  cfg = PoolConfig(backend="flaky9", min_idle=0, retries=2, backoff_s=0.01)
  with SandboxPool(config=cfg) as pool:
    with pytest.raises(sandbox_lib.SandboxError, match="failed 3 times"):
      pool.acquire()

  sandbox_lib.register("broken", _Flaky(1, exc=ValueError))  # a bug, not infrastructure
  with SandboxPool(config=PoolConfig(backend="broken", min_idle=0)) as pool:
    with pytest.raises(ValueError):
      pool.acquire()
    assert pool.stats_dict().get("retries", 0) == 0


def test_dead_idle_sandboxes_are_replaced(sandbox_image):
  cfg = PoolConfig(min_idle=1, health_every_s=1.0)
  with SandboxPool(config=cfg) as pool:
    _until(lambda: pool.stats_dict()["idle"] == 1, "the warm sandbox")
    victim = pool._subs[pool.default_spec].idle[0][0]
    os.kill(victim.pid1, signal.SIGKILL)  # the sandbox dies under the pool
    _until(lambda: not victim.alive, "the victim to die")
    _until(lambda: pool.stats_dict().get("unhealthy", 0) >= 1, "the health check")
    sb = pool.acquire()
    assert sb is not victim and sb.exec("echo fine").stdout == "fine\n"


def test_pool_smoke_on_each_backend(backend):
  with SandboxPool(config=PoolConfig(backend=backend, min_idle=1)) as pool:
    with pool.sandbox() as sb:
      assert sb.exec("id -un").stdout == "root\n"  # container mode by default
    with pool.sandbox(sandbox_lib.SandboxSpec(memory_mb=512)) as sb:  # another spec, own sub-pool
      assert sb.spec.memory_mb == 512 and sb.alive
