"""Test set-up: 8 fake CPU devices and strict rank promotion, before JAX is imported."""

import ctypes
import gc
import os
import signal
import warnings

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The engine turns on JAX's persistent compilation cache, which is process-global state;
# the suite keeps each test's compiles its own (a numeric test failed only in a full run).
os.environ.setdefault("AGENTRL_COMPILE_CACHE", "0")

import jax  # noqa: E402
import pytest  # noqa: E402

_LIBC = ctypes.CDLL("libc.so.6")

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(autouse=True, scope="module")
def _release_memory_after_each_module():
  """Drops JAX's compiled-function caches and returns freed heap to the OS after each test
  file. A pytest worker lives for half the suite; without this it kept every file's compiled
  programs and grew to 7 GB, so two workers and a test's own subprocesses crowded 24 GB."""
  yield
  gc.collect()
  jax.clear_caches()
  _LIBC.malloc_trim(0)  # glibc keeps freed arenas otherwise; no library exposes this


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(autouse=True)
def _signals_as_they_were():
  """Puts back the worker's blocked-signal mask, and a SIGINT/SIGTERM that a test left ignored,
  with a warning naming the test: both survive exec, so every process a later test starts
  inherits them, and a child that cannot see the SIGTERM a test sends it hangs that test (the
  teardown and multi-process preemption tests, in full runs). Python-level handlers (the
  sandboxes' teardown) are not inherited and stay."""
  handlers = {s: signal.getsignal(s) for s in _SIGNALS}
  mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
  yield
  now = signal.pthread_sigmask(signal.SIG_SETMASK, mask)
  changed = [f"blocked {sorted(x.name for x in now ^ mask)}"] if now != mask else []
  for s in _SIGNALS:
    if signal.getsignal(s) == signal.SIG_IGN != handlers[s] and handlers[s] is not None:
      signal.signal(s, handlers[s])
      changed.append(f"{s.name} ignored")
  if changed:
    warnings.warn(f"this test left {', '.join(changed)} (put back)", stacklevel=1)


def pytest_collection_modifyitems(config, items):
  """Files with a `slow` test first, then the files with the most tests (xdist's own order):
  with `--dist loadfile` a worker takes a whole file, and the 10-minute demo started last
  kept one worker busy after the other had finished. `--no-loadscope-reorder` (pyproject)
  makes xdist keep this order."""
  count, slow = {}, set()
  for item in items:
    count[item.path] = count.get(item.path, 0) + 1
    if item.get_closest_marker("slow"):
      slow.add(item.path)
  items.sort(key=lambda item: (item.path not in slow, -count[item.path], str(item.path)))


def pytest_runtest_setup(item):
  """A test marked `docker` skips without a daemon, and fails under CI=true (CI has one)."""
  if item.get_closest_marker("docker"):
    from envs.sandbox.testing import require_docker  # noqa: PLC0415

    require_docker()
