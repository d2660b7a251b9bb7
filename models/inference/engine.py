"""Generation engine with JetStream's Engine API shape over a paged KV cache.

`prefill` runs a prompt (optionally on top of tokens already cached in a slot's pages) and
returns a `Prefix`; `insert` writes it into a decode slot; `generate` is ONE jitted step over
all slots (donated state) that feeds each slot's last token, writes its K/V into its pages,
attends over its page table and samples the next token with the slot's own sampling params.
Prompts are padded to power-of-two buckets, params are jit arguments, and slots come and go as
array updates, so neither new requests nor `load_params` recompile anything.

The steps themselves (pure functions, layer layouts) are in models.inference.engine_steps; warm-up and
the persistent compilation cache in models.inference.engine_compile. Decode variants are few (page
buckets in powers of 2, steps 1 or the generator's chunk). The host (models.inference.generator) owns
page allocation and passes each slot's page table row; the engine never syncs with the host.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from models import quant
from models import sampling as smp
from models.config import ModelConfig
from models.inference import engine_compile as ec
from models.inference import kv_cache as kvc
from models.inference import kv_evict
from models.inference import paged_attention as pa
from models.inference.engine_compile import enable_compile_cache
from models.inference.engine_steps import (
  GENERATE_JIT,
  GENERATE_STEPS_JIT,
  INSERT_JIT,
  PREFILL_JIT,
  QUANTIZE_JIT,
  TRACES,
  UNSTACK_JIT,
  DecodeState,
  Prefix,
  StepOutput,
  decode_attend,
  decode_fn,
  decode_steps_fn,
  insert_fn,
  prefill_fn,
  unembed,
  unstack_layers,
)

__all__ = [
  "TRACES", "DecodeState", "Engine", "Prefix", "StepOutput", "decode_attend", "decode_fn",
  "decode_steps_fn", "enable_compile_cache", "insert_fn", "prefill_fn", "unembed",
  "unstack_layers",
]  # fmt: skip


def _bucket(n: int, max_len: int, smallest: int = 16) -> int:
  b = smallest
  while b < n:
    b *= 2
  return min(b, max_len)


def to_device(x, dtype=np.int32) -> jax.Array:
  """A device array of a private host copy of `x`.

  On the CPU backend a NumPy array handed to JAX is read *asynchronously* (the transfer may
  run after the call returns), so a caller that then mutates its array in place (the
  generator's page table) could change what already-dispatched steps read: K/V written into
  another slot's pages. A fresh copy nobody mutates makes the transfer safe.
  """
  return jnp.asarray(np.array(x, dtype, copy=True))


class Engine:
  """Slots, pages and jitted steps; JetStream-shaped (prefill / insert / generate)."""

  def __init__(
    self,
    model_cfg: ModelConfig,
    params,
    *,
    max_concurrent_decodes: int = 8,
    max_seq_len: int | None = None,
    page_size: int = 16,
    num_pages: int | None = None,
    kv_dtype: str = "float32",
    weight_dtype: str = "float32",
    window: kv_evict.Window | None = None,
    version: int = 0,
    attention: str = "paged_ffi",
  ):
    self.cfg = model_cfg
    self.max_concurrent_decodes = max_concurrent_decodes
    max_len = max_seq_len or model_cfg.max_seq_len
    if max_len > model_cfg.max_seq_len:
      raise ValueError(f"max_seq_len {max_len} exceeds the model's {model_cfg.max_seq_len}")
    self.page_size, self.window = page_size, window
    self.pages_per_slot = window.pages if window else -(-max_len // page_size)
    self.max_seq_len = -(-max_len // page_size) * page_size
    self.num_pages = num_pages or max_concurrent_decodes * self.pages_per_slot + 1
    self.kv_dtype = kv_dtype
    if weight_dtype not in ("float32", "int8"):
      raise ValueError(f"weight_dtype must be 'float32' or 'int8' (got {weight_dtype!r})")
    self.weight_dtype = weight_dtype
    # Decode attention: "gather" (reference) or "paged_ffi" (the fused CPU kernel; "gather"
    # where it is unavailable, logged once). benchmarks/paged_decode.py measures both.
    self.attention = pa.resolve(attention)
    enable_compile_cache()
    params = self._prepare(params)
    self._shardings = jax.tree.map(lambda a: a.sharding, jax.device_put(params))
    self._set(jax.device_put(params, self._shardings))
    self.policy_version = version
    self.prefill_jit = functools.partial(PREFILL_JIT, cfg=model_cfg)
    self.insert_jit = functools.partial(INSERT_JIT, window=window)
    decode = dict(cfg=model_cfg, window=window, attention=self.attention)
    self.generate_jit = functools.partial(GENERATE_JIT, **decode)
    self.generate_steps_jit = functools.partial(GENERATE_STEPS_JIT, **decode)

  # -- JetStream Engine API ---------------------------------------------------------------
  def _prepare(self, params):
    if self.weight_dtype == "int8" and not quant.is_quantized(params):
      return QUANTIZE_JIT(params)
    return params

  def load_params(self, params, version: int | None = None):
    """Swaps weights (same structure, shapes, dtypes) without recompiling; returns them."""
    params = self._prepare(params)
    old = jax.tree.structure(self.params)
    if jax.tree.structure(params) != old:
      raise ValueError(f"load_params: tree structure differs from the engine's:\n{old}")
    for path, a, b in zip(
      jax.tree_util.tree_leaves_with_path(self.params), jax.tree.leaves(self.params),
      jax.tree.leaves(params), strict=True,
    ):  # fmt: skip
      if a.shape != b.shape or a.dtype != b.dtype:
        name = jax.tree_util.keystr(path[0])
        raise ValueError(f"load_params: {name} is {b.dtype}{b.shape}, expected {a.dtype}{a.shape}")
    self._set(jax.device_put(params, self._shardings))
    self.policy_version = self.policy_version + 1 if version is None else version
    return self.params

  def _set(self, params):
    # Decode runs on a per-layer copy (unstack_layers): one extra copy of the layer weights.
    # Prefill scans the stacked layers (shared buffers) with the run layout's LM head.
    self.params, self.run_params = params, UNSTACK_JIT(params)
    self.scan_params = dict(params, lm_head=self.run_params["lm_head"])

  def _resolve(self, params):
    return self.run_params if params is None or params is self.params else params

  def _resolve_prefill(self, params):
    return self.scan_params if params is None or params is self.params else params

  def signature(self):
    """What, besides a call's own key, fixes the shapes of the engine's compiled steps."""
    return (self.cfg, self.window, self.max_concurrent_decodes, self.num_pages, self.page_size,
            self.pages_per_slot, self.kv_dtype, self.weight_dtype, self.attention)  # fmt: skip

  def _call(self, key, own: bool, jitted, *args, **static):
    return ec.VARIANTS.call((self.signature(), *key), own, jitted, *args, **static)

  def init_decode_state(self) -> DecodeState:
    cfg, S = self.cfg, self.max_concurrent_decodes
    cache = kvc.init_cache(
      cfg.n_layers, self.num_pages, self.page_size, cfg.n_kv_heads, cfg.head_dim, self.kv_dtype
    )
    samp = smp.stack_params([smp.SamplingParams(greedy=True)] * S)
    table = jnp.full((S, self.pages_per_slot), kvc.NULL_PAGE, jnp.int32)
    lengths, tokens = jnp.zeros((S,), jnp.int32), jnp.zeros((S,), jnp.int32)  # distinct buffers
    return DecodeState(cache, table, lengths, tokens, jax.tree.map(jnp.asarray, samp))

  def bucket(self, n: int) -> int:
    return _bucket(n, self.max_seq_len)

  def prefill(
    self, *, params=None, padded_tokens, true_length, sampling=None, start=0, context=None
  ) -> Prefix:
    """Prefill of one request ([T] tokens, ints) or a batch ([B, T] tokens, [B] ints).

    `context=(state, page_rows)` lets the new tokens attend to the first `start` tokens
    already cached in those pages (prefix reuse). `sampling` is a SamplingParams or a list.
    """
    tokens_BT = np.atleast_2d(np.asarray(padded_tokens, np.int32))
    B = tokens_BT.shape[0]
    start_B = np.broadcast_to(np.asarray(start, np.int32), (B,))
    true_B = np.broadcast_to(np.asarray(true_length, np.int32), (B,))
    if np.any(start_B + true_B > self.max_seq_len) or np.any(true_B < 1):
      raise ValueError(f"prefill: lengths {start_B + true_B} not in [1, {self.max_seq_len}]")
    samp = sampling if isinstance(sampling, list | tuple) else [sampling] * B
    rows = smp.stack_params([s or smp.SamplingParams(greedy=True) for s in samp])
    ctx = None
    if context is not None and np.any(start_B > 0):
      if self.window is not None:
        raise ValueError("prefill: cached context (prefix reuse) is not supported with a KV window")
      page_rows = np.asarray(context[1], np.int32).reshape(B, -1)
      ctx = (context[0].cache, to_device(page_rows))
    own = params is None or params is self.params
    key = ("prefill", *tokens_BT.shape, ctx is not None)
    return self._call(
      key, own, self.prefill_jit, self._resolve_prefill(params), to_device(tokens_BT),
      to_device(start_B), to_device(true_B), rows, ctx,
    )  # fmt: skip

  def insert(self, prefix: Prefix, decode_state: DecodeState, slot, page_row) -> DecodeState:
    """Row b of prefix -> slot[b] (an int for a single request) with page_row[b] ([M] or [B, M])."""
    slots_B = np.atleast_1d(np.asarray(slot, np.int32))
    rows_BM = np.asarray(page_row, np.int32).reshape(len(slots_B), -1)
    key = ("insert", *prefix.k_LBTKd.shape[1:3])
    return self._call(
      key, True, self.insert_jit, prefix, decode_state, to_device(slots_B), to_device(rows_BM)
    )

  def generate(
    self, params=None, decode_state: DecodeState = None, *, pages: int | None = None,
    steps: int = 1,
  ):  # fmt: skip
    """Decode step(s) over all slots: (new state, StepOutput). Dispatches asynchronously.

    `pages` (see attention_pages) bounds the page-table entries attended to; None: all.
    `steps` > 1 runs that many steps in one call; the StepOutput arrays are then [steps, S].
    """
    own, run = params is None or params is self.params, self._resolve(params)
    key = ("generate", pages, steps)
    if steps == 1:
      return self._call(key, own, self.generate_jit, run, decode_state, pages=pages)
    return self._call(
      key, own, self.generate_steps_jit, run, decode_state, pages=pages, steps=steps
    )

  def attention_pages(self, n_tokens: int) -> int | None:
    """Power-of-2 bucket of the pages holding n_tokens (few decode variants to compile);
    None (all) when that is every page or with a KV window. Powers of 4 attended up to 2x
    more pages than powers of 2 (a decode step at 32 slots, 8 vs 12 pages: 9% faster)."""
    b = 1
    while b * self.page_size < n_tokens:
      b *= 2
    return None if self.window is not None or b >= self.pages_per_slot else b

  def page_buckets(self) -> list[int | None]:
    """Every value attention_pages can return."""
    out, b = [], 1
    while self.window is None and b < self.pages_per_slot:
      out.append(b)
      b *= 2
    return [*out, None]

  def warmup(self, *, prompt_buckets=(), prefill_batches=(1,), steps=(1,), buckets=None,
             background=False):  # fmt: skip
    """Compiles decode (page `buckets`, default all, x `steps`), and prefill + insert for
    each (batch, bucket), ahead of the first request. background=True returns the started
    thread (calls made meanwhile compile on their own); else returns None when done."""
    return ec.warmup(
      self, prompt_buckets=prompt_buckets, prefill_batches=prefill_batches, steps=steps,
      buckets=buckets, background=background,
    )  # fmt: skip

  def set_page_table(self, decode_state: DecodeState, page_table_SM) -> DecodeState:
    """Replaces every slot's page row (host-side allocation changed)."""
    table = to_device(page_table_SM)  # the caller keeps mutating its table
    return dataclasses.replace(decode_state, page_table_SM=table)
