"""Test set-up: 8 fake CPU devices and strict rank promotion, before JAX is imported."""

import ctypes
import gc
import os

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
