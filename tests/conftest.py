"""Test set-up: 8 fake CPU devices and strict rank promotion, before JAX is imported."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The engine turns on JAX's persistent compilation cache, which is process-global state;
# the suite keeps each test's compiles its own (a numeric test failed only in a full run).
os.environ.setdefault("AGENTRL_COMPILE_CACHE", "0")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
