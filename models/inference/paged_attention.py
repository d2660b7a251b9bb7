"""Fused paged-attention decode on XLA:CPU: a C++ kernel (models/native/paged_attention.cc)
called through `jax.ffi`, reading each slot's keys and values in place through its page table.

The engine's reference decode path (`attention="gather"`) copies every slot's pages into a
contiguous [S, M*p, K, d] view per layer (kv_cache.gather) and attends over it
(engine_steps.decode_attend); `attention="paged_ffi"` runs this kernel instead: the same
masking (key positions <= the slot's position), GQA, fp32 softmax and cache dtypes (float32,
bfloat16, int8 with per-row scales), one query token per slot. Multi-token queries (prefill on
top of cached pages) stay on the gather path; speculative decoding keeps its own dense caches.

The kernel is built once at set-up (`python -m launch.build_native`, run by launch/setup.sh)
into models/native/_build/ (not in git), named by a hash of its source and flags, and loaded on
first use. Where it is missing, stale or the backend is not the CPU, `resolve` answers "gather"
and logs one line why.

Legend: S slots, H query heads, K kv heads, d head dim, L layers, P pages, p page size,
M pages per slot, N = M*p key positions.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

SOURCE = pathlib.Path(__file__).resolve().parents[1] / "native" / "paged_attention.cc"
FLAGS = ("-O3", "-march=native", "-ffp-contract=fast", "-std=c++17", "-shared", "-fPIC")
TARGET = "agentrl_paged_decode"
ATTENTIONS = ("gather", "paged_ffi")
# Slots are split over this many of XLA's intra-op threads (1: the calling thread only). On the
# 2-core CPU a second thread sped up the attention alone but not the engine's decode step
# (benchmarks/paged_decode.py --threads / --engine_threads), and takes CPU from a trainer.
THREADS = 1


def library_path() -> pathlib.Path:
  """Where launch.build_native puts the kernel built from the current source and flags."""
  digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:12]
  return SOURCE.parent / "_build" / f"paged_attention-{digest}.so"


@functools.cache
def unavailable() -> str | None:
  """None once the kernel is registered with XLA:CPU, else why it cannot be."""
  if jax.default_backend() != "cpu":
    return f"the backend is {jax.default_backend()}, the kernel is CPU-only"
  path = library_path()
  if not path.exists():
    return f"{path.name} is not built (python -m launch.build_native, or launch/setup.sh)"
  lib = ctypes.cdll.LoadLibrary(str(path))
  jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.AgentrlPagedDecode), platform="cpu")
  return None


@functools.cache
def _fall_back(why: str) -> None:
  logging.getLogger(__name__).warning("attention='paged_ffi' unavailable (%s): using 'gather'", why)


def resolve(attention: str) -> str:
  """The decode attention the engine will run: `attention`, or "gather" where the kernel is
  unavailable (logged once)."""
  if attention not in ATTENTIONS:
    raise ValueError(f"decode attention {attention!r} not in {ATTENTIONS}")
  if attention == "paged_ffi" and (why := unavailable()):
    _fall_back(why)
    return "gather"
  return attention


def decode_attend(q_SHd, cache, layer, table_SM, k_pos_SN, pos_S, *, compute_dtype=None,
                  threads: int | None = None):  # fmt: skip
  """engine_steps.decode_attend over kv_cache.gather's view, fused: out [S, 1, H, d] in q's dtype.

  `layer` may be traced; `compute_dtype` (default q's) is the dtype the gather path casts keys
  and values to, which the kernel reproduces (a bfloat16 compute dtype rounds them).
  `threads`: None for THREADS (read when traced).
  """
  if why := unavailable():  # also registers the kernel on first use
    raise RuntimeError(f"paged-attention kernel unavailable: {why}")
  S, H, d = q_SHd.shape
  f32 = jnp.float32
  q_SHd_f32 = q_SHd.astype(f32) * d**-0.5  # the same op as the reference, so the same q
  dummy = jnp.zeros((1,), f32)
  k_scale = dummy if cache.k_scale is None else cache.k_scale
  v_scale = dummy if cache.v_scale is None else cache.v_scale
  round_bf16 = jnp.dtype(compute_dtype or q_SHd.dtype) == jnp.bfloat16
  call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((S, H, d), f32))
  out = call(
    q_SHd_f32, cache.k, cache.v, k_scale, v_scale, table_SM.astype(jnp.int32),
    k_pos_SN.astype(jnp.int32), pos_S.astype(jnp.int32), jnp.asarray(layer, jnp.int32),
    round_bf16=bool(round_bf16), threads=np.int64(THREADS if threads is None else threads),
  )  # fmt: skip
  return out.reshape(S, 1, H, d).astype(q_SHd.dtype)
