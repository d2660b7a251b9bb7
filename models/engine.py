"""Generation engine with JetStream's Engine API shape over a paged KV cache.

`prefill` runs a prompt (optionally on top of tokens already cached in a slot's pages) and
returns a `Prefix`; `insert` writes it into a decode slot; `generate` is ONE jitted step over
all slots (donated state) that feeds each slot's last token, writes its K/V into its pages,
attends over its page table and samples the next token with the slot's own sampling params.
Prompts are padded to power-of-two buckets, params are jit arguments, and slots come and go as
array updates, so neither new requests nor `load_params` recompile anything.

The host (models.generator) owns page allocation and passes each slot's page table row; the
engine never syncs with the host. Everything numeric here is a pure function.

Legend: S decode slots, M pages per slot, p page size, T prompt (bucket) length, L layers,
K kv heads, H query heads, d head_dim, D width, V vocab.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from models import kv_cache as kvc
from models import sampling as smp
from models import transformer as tfm
from models.attention import attend
from models.config import ModelConfig

TRACES: collections.Counter = collections.Counter()  # trace counts per jitted fn (tests)


@dataclasses.dataclass(frozen=True)
class DecodeState:
  """Device state of all decode slots (a pytree; donated to every step)."""

  cache: kvc.KVCache
  page_table_SM: jax.Array  # int32 page ids, NULL_PAGE where unallocated
  lengths_S: jax.Array  # int32 tokens in the cache = position of tokens_S
  tokens_S: jax.Array  # int32 next token to feed (the last sampled one)
  sampling: smp.SlotSampling


@dataclasses.dataclass(frozen=True)
class Prefix:
  """Output of prefill: K/V of the new tokens and the first sampled token (JetStream's Prefix)."""

  k_LTKd: jax.Array
  v_LTKd: jax.Array
  start: jax.Array  # int32 position of the first new token
  length: jax.Array  # int32 start + true length (tokens in the cache after insert)
  token: jax.Array  # int32 first sampled token
  logprob: jax.Array  # float32 its logprob under the sampled distribution
  sampling: smp.SlotSampling  # the request's sampling params, one row


@dataclasses.dataclass(frozen=True)
class StepOutput:
  tokens_S: jax.Array
  logprobs_S: jax.Array


for _cls, _fields in (
  (DecodeState, ["cache", "page_table_SM", "lengths_S", "tokens_S", "sampling"]),
  (Prefix, ["k_LTKd", "v_LTKd", "start", "length", "token", "logprob", "sampling"]),
  (StepOutput, ["tokens_S", "logprobs_S"]),
):
  jax.tree_util.register_dataclass(_cls, data_fields=_fields, meta_fields=[])


# ------------------------------------------------------------------------ pure functions


def _layer_scan(params, cfg, x_BTD, carry, body):
  """Runs the layer stack; body(lp, layer, x, carry) -> (x, carry, ys)."""

  def step(c, xs):
    x, extra = c
    lp, layer = xs
    x, extra, ys = body(lp, layer, x, extra)
    return (x, extra), ys

  layers = jnp.arange(cfg.n_layers)
  (x, carry), ys = jax.lax.scan(step, (x_BTD, carry), (params["layers"], layers))
  return x, carry, ys


def prefill_fn(params, tokens_T, start, true_length, sampling_row, ctx, *, cfg: ModelConfig):
  """Prompt forward pass; ctx = (cache, page_row_M) of tokens already cached, or None."""
  TRACES["prefill"] += 1
  (T,) = tokens_T.shape
  pos_1T = (start + jnp.arange(T, dtype=jnp.int32))[None]
  x = tfm.embed(params, tokens_T[None], cfg)

  def body(lp, layer, x, _):
    q, k, v = tfm.layer_qkv(lp, x, pos_1T, cfg)
    k_pos_1S, k_seg_1S = pos_1T, jnp.ones_like(pos_1T)
    k_all, v_all = k, v
    if ctx is not None:
      cache, page_row_M = ctx
      kc, vc = kvc.gather(cache, layer, page_row_M[None], dtype=k.dtype)
      ctx_pos_1S = jnp.arange(kc.shape[1], dtype=jnp.int32)[None]
      k_all = jnp.concatenate([kc, k], axis=1)
      v_all = jnp.concatenate([vc, v], axis=1)
      k_pos_1S = jnp.concatenate([ctx_pos_1S, pos_1T], axis=1)
      k_seg_1S = jnp.concatenate([(ctx_pos_1S < start).astype(jnp.int32), k_seg_1S], axis=1)
    attn = attend(
      q, k_all, v_all, q_pos_BT=pos_1T, k_pos_BS=k_pos_1S, k_seg_BS=k_seg_1S,
      impl=cfg.attention, chunk=cfg.attn_chunk,
    )  # fmt: skip
    x, _ = tfm.layer_finish(lp, x, attn, cfg)
    return x, None, (k[0], v[0])

  x, _, (k_LTKd, v_LTKd) = _layer_scan(params, cfg, x, None, body)
  x_last = jax.lax.dynamic_slice_in_dim(x, true_length - 1, 1, axis=1)
  logits_1V = tfm.unembed(params, x_last, cfg)[:, 0]
  length = start + true_length
  token, logprob = smp.sample_logprobs(logits_1V, sampling_row, length[None])
  return Prefix(k_LTKd, v_LTKd, start, length, token[0], logprob[0], sampling_row)


def insert_fn(prefix: Prefix, state: DecodeState, slot, page_row_M) -> DecodeState:
  """Writes the prefix's K/V into the slot's pages and makes the slot decode from it."""
  TRACES["insert"] += 1
  T = prefix.k_LTKd.shape[1]
  pos_1T = (prefix.start + jnp.arange(T, dtype=jnp.int32))[None]
  page_1T, off_1T = kvc.write_positions(
    page_row_M[None], pos_1T, state.cache.page_size, pos_1T < prefix.length
  )
  cache = kvc.write(state.cache, slice(None), page_1T[0], off_1T[0], prefix.k_LTKd, prefix.v_LTKd)
  samp = jax.tree.map(lambda a, r: a.at[slot].set(r[0]), state.sampling, prefix.sampling)
  return DecodeState(
    cache=cache,
    page_table_SM=state.page_table_SM.at[slot].set(page_row_M),
    lengths_S=state.lengths_S.at[slot].set(prefix.length),
    tokens_S=state.tokens_S.at[slot].set(prefix.token),
    sampling=samp,
  )


def decode_fn(params, state: DecodeState, *, cfg: ModelConfig):
  """One decode step for every slot: feed tokens_S at lengths_S, sample the next token."""
  TRACES["generate"] += 1
  S, M = state.page_table_SM.shape
  p = state.cache.page_size
  pos_S1 = state.lengths_S[:, None]
  page_S1, off_S1 = kvc.write_positions(state.page_table_SM, pos_S1, p, pos_S1 >= 0)
  k_pos_SL = jnp.broadcast_to(jnp.arange(M * p, dtype=jnp.int32)[None], (S, M * p))
  x = tfm.embed(params, state.tokens_S[:, None], cfg)

  def body(lp, layer, x, cache):
    q, k, v = tfm.layer_qkv(lp, x, pos_S1, cfg)
    cache = kvc.write(cache, layer, page_S1[:, 0], off_S1[:, 0], k[:, 0], v[:, 0])
    kc, vc = kvc.gather(cache, layer, state.page_table_SM, dtype=k.dtype)
    attn = attend(q, kc, vc, q_pos_BT=pos_S1, k_pos_BS=k_pos_SL, impl="naive")
    x, _ = tfm.layer_finish(lp, x, attn, cfg)
    return x, cache, None

  x, cache, _ = _layer_scan(params, cfg, x, state.cache, body)
  logits_SV = tfm.unembed(params, x, cfg)[:, 0]
  token_S, logprob_S = smp.sample_logprobs(logits_SV, state.sampling, pos_S1[:, 0] + 1)
  # Idle slots keep stepping (their page rows are NULL, so writes go nowhere); cap their length.
  lengths_S = jnp.minimum(state.lengths_S + 1, M * p - 1)
  new = DecodeState(cache, state.page_table_SM, lengths_S, token_S, state.sampling)
  return new, StepOutput(token_S, logprob_S)


# Module-level jits (cfg static) so engines of the same config share compiled steps.
_PREFILL_JIT = jax.jit(prefill_fn, static_argnames=("cfg",))
_INSERT_JIT = jax.jit(insert_fn, donate_argnums=(1,))
_GENERATE_JIT = jax.jit(decode_fn, static_argnames=("cfg",), donate_argnums=(1,))

# ------------------------------------------------------------------------ the engine


def _bucket(n: int, max_len: int, smallest: int = 16) -> int:
  b = smallest
  while b < n:
    b *= 2
  return min(b, max_len)


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
    version: int = 0,
  ):
    self.cfg = model_cfg
    self.max_concurrent_decodes = max_concurrent_decodes
    max_len = max_seq_len or model_cfg.max_seq_len
    if max_len > model_cfg.max_seq_len:
      raise ValueError(f"max_seq_len {max_len} exceeds the model's {model_cfg.max_seq_len}")
    self.page_size = page_size
    self.pages_per_slot = -(-max_len // page_size)
    self.max_seq_len = self.pages_per_slot * page_size
    self.num_pages = num_pages or max_concurrent_decodes * self.pages_per_slot + 1
    self.kv_dtype = kv_dtype
    self._shardings = jax.tree.map(lambda a: a.sharding, jax.device_put(params))
    self.params = jax.device_put(params, self._shardings)
    self.policy_version = version
    self._prefill_jit = functools.partial(_PREFILL_JIT, cfg=model_cfg)
    self._insert_jit = _INSERT_JIT
    self._generate_jit = functools.partial(_GENERATE_JIT, cfg=model_cfg)

  # -- JetStream Engine API ---------------------------------------------------------------
  def load_params(self, params, version: int | None = None):
    """Swaps weights (same structure, shapes, dtypes) without recompiling; returns them."""
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
    self.params = jax.device_put(params, self._shardings)
    self.policy_version = self.policy_version + 1 if version is None else version
    return self.params

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
    self, *, params=None, padded_tokens, true_length: int, sampling=None, start: int = 0,
    context: tuple[DecodeState, np.ndarray] | None = None,
  ) -> Prefix:  # fmt: skip
    """Prefill; `context=(state, page_row)` attends to the slot's first `start` cached tokens."""
    if start + true_length > self.max_seq_len:
      raise ValueError(f"prompt of {start + true_length} tokens > max_seq_len {self.max_seq_len}")
    row = smp.stack_params([sampling or smp.SamplingParams(greedy=True)])
    ctx = None
    if context is not None and start > 0:
      ctx = (context[0].cache, jnp.asarray(context[1], jnp.int32))
    return self._prefill_jit(
      self.params if params is None else params, jnp.asarray(padded_tokens, jnp.int32),
      jnp.int32(start), jnp.int32(true_length), row, ctx,
    )  # fmt: skip

  def insert(self, prefix: Prefix, decode_state: DecodeState, slot: int, page_row) -> DecodeState:
    return self._insert_jit(prefix, decode_state, jnp.int32(slot), jnp.asarray(page_row, jnp.int32))

  def generate(self, params=None, decode_state: DecodeState = None):
    """One decode step over all slots: (new state, StepOutput). Dispatches asynchronously."""
    return self._generate_jit(self.params if params is None else params, decode_state)

  def set_page_table(self, decode_state: DecodeState, page_table_SM) -> DecodeState:
    """Replaces every slot's page row (host-side allocation changed)."""
    table = jnp.asarray(np.asarray(page_table_SM, np.int32))
    return dataclasses.replace(decode_state, page_table_SM=table)
