"""Compiling the engine's steps ahead of the first request, and the persistent compile cache.

`VARIANTS` maps (engine signature, kind, shapes...) to an executable compiled ahead of time, or
to an Event while `warmup` compiles it; engines of the same shapes share it, like the module
jits of models.inference.engine_steps. `enable_compile_cache` turns on JAX's persistent compilation cache
so a second process finds the executables on disk.
"""

from __future__ import annotations

import functools
import os
import threading

import jax
import jax.numpy as jnp

from models import sampling as smp


def enable_compile_cache(path: str | None = None) -> str | None:
  """Turns on JAX's persistent compilation cache unless one is already configured.

  Default folder: $AGENTRL_CACHE/jax, else ~/.cache/agentrl/jax; AGENTRL_COMPILE_CACHE=0
  disables. Returns the folder in use (None: disabled).
  """
  current = jax.config.jax_compilation_cache_dir
  if current:
    return current
  if path is None:
    if os.environ.get("AGENTRL_COMPILE_CACHE", "1") == "0":
      return None
    base = os.environ.get("AGENTRL_CACHE") or os.path.join(
      os.path.expanduser("~"), ".cache", "agentrl"
    )
    path = os.path.join(base, "jax")
  jax.config.update("jax_compilation_cache_dir", path)
  return path


class VariantTable:
  """Executables compiled ahead of time, keyed by (signature, kind, shapes...); thread-safe."""

  def __init__(self):
    self._exes: dict = {}
    self._lock = threading.Lock()

  def call(self, full_key, own: bool, jitted, *args, **static):
    """The executable for full_key when the engine's own params run (waiting for it if a
    warm-up is compiling it), else the jit."""
    exe = self._exes.get(full_key) if own else None
    if isinstance(exe, threading.Event):
      exe.wait()
      exe = self._exes.get(full_key)
    return exe(*args) if exe is not None else jitted(*args, **static)

  def compile(self, full_key, lower) -> None:
    """Compiles lower() under full_key unless it is there or being compiled."""
    with self._lock:
      if full_key in self._exes:
        return
      self._exes[full_key] = done = threading.Event()
    try:
      self._exes[full_key] = lower().compile()
    except BaseException:
      del self._exes[full_key]
      raise
    finally:
      done.set()


VARIANTS = VariantTable()


def lower(jitted: functools.partial, *args, **kwargs):
  """Lowers a functools.partial of a jit (the engine's bound steps) for these arguments."""
  return jitted.func.lower(*args, **jitted.keywords, **kwargs)


def warmup(engine, *, prompt_buckets=(), prefill_batches=(1,), steps=(1,), buckets=None,
           background=False):  # fmt: skip
  """See Engine.warmup: compiles its decode, prefill and insert variants into VARIANTS."""
  if background:
    kw = dict(prompt_buckets=prompt_buckets, prefill_batches=prefill_batches, steps=steps)
    t = threading.Thread(
      target=warmup,
      name="agentrl-engine-warmup",
      # Not a daemon: the interpreter joins it at exit, since a thread still compiling
      # inside XLA while Python finalises aborts the process ("terminate called ...").
      daemon=False,
      args=(engine,),
      kwargs=dict(kw, buckets=buckets),
    )
    t.start()
    return t
  sig = engine.signature()
  state = jax.eval_shape(engine.init_decode_state)
  for n in sorted(steps, reverse=True):
    for pages in engine.page_buckets() if buckets is None else buckets:
      jitted = engine.generate_jit if n == 1 else engine.generate_steps_jit
      extra = {} if n == 1 else {"steps": n}
      VARIANTS.compile(
        (sig, "generate", pages, n),
        functools.partial(lower, jitted, engine.run_params, state, pages=pages, **extra),
      )
  for B in prefill_batches:
    for T in sorted({engine.bucket(t) for t in prompt_buckets}):
      i32 = jax.ShapeDtypeStruct((B,), jnp.int32)
      rows = jax.tree.map(jnp.asarray, smp.stack_params([smp.SamplingParams(greedy=True)] * B))
      args = (engine.scan_params, jax.ShapeDtypeStruct((B, T), jnp.int32), i32, i32, rows, None)
      VARIANTS.compile(
        (sig, "prefill", B, T, False), functools.partial(lower, engine.prefill_jit, *args)
      )
      prefix = jax.eval_shape(engine.prefill_jit, *args)
      rows_BM = jax.ShapeDtypeStruct((B, engine.pages_per_slot), jnp.int32)
      VARIANTS.compile(
        (sig, "insert", B, T),
        functools.partial(lower, engine.insert_jit, prefix, state, i32, rows_BM),
      )
  return None
