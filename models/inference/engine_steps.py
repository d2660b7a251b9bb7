"""The engine's pure functions: prefill, insert and decode steps over a paged KV cache.

Layer layouts (measured on SmolLM2-135M, 30 layers, XLA:CPU): prefill runs a `lax.scan` over
the stacked layers (compile time flat in depth; as fast as unrolled at prompt shapes), decode
runs unrolled over per-layer buffers (a scan copies each layer's weight slice every step:
batch-1 decode 18 vs 24 tok/s). The jits are module-level (cfg static) so engines of the same
config share compiled steps. models.inference.engine holds the host-side Engine over them.

Legend: S decode slots, M pages per slot, p page size, T prompt (bucket) length, L layers,
K kv heads, H query heads, d head_dim, D width, V vocab.
"""

from __future__ import annotations

import collections
import dataclasses

import jax
import jax.numpy as jnp

from models import quant
from models import sampling as smp
from models import transformer as tfm
from models.attention import attend
from models.config import ModelConfig
from models.inference import kv_cache as kvc
from models.inference import kv_evict
from models.inference import paged_attention as pa
from models.moe import EXPERT_WEIGHTS

TRACES: collections.Counter = collections.Counter()  # trace counts per jitted fn (tests)
_NEG = -1e30  # finite "minus infinity" for masked scores


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
  """Output of prefill for B requests: K/V of their new tokens and first sampled tokens.

  JetStream's Prefix; `insert` writes row b into slot slots[b].
  """

  k_LBTKd: jax.Array
  v_LBTKd: jax.Array
  start_B: jax.Array  # int32 position of the first new token
  length_B: jax.Array  # int32 start + true length (tokens in the cache after insert)
  token_B: jax.Array  # int32 first sampled token
  logprob_B: jax.Array  # float32 its logprob under the sampled distribution
  sampling: smp.SlotSampling  # the requests' sampling params, B rows


@dataclasses.dataclass(frozen=True)
class StepOutput:
  tokens_S: jax.Array
  logprobs_S: jax.Array


for _cls, _fields in (
  (DecodeState, ["cache", "page_table_SM", "lengths_S", "tokens_S", "sampling"]),
  (Prefix, ["k_LBTKd", "v_LBTKd", "start_B", "length_B", "token_B", "logprob_B", "sampling"]),
  (StepOutput, ["tokens_S", "logprobs_S"]),
):
  jax.tree_util.register_dataclass(_cls, data_fields=_fields, meta_fields=[])


# ------------------------------------------------------------------------ pure functions


def unstack_layers(params):
  """The engine's run layout: `layers` as a tuple of per-layer trees instead of stacked arrays.

  With stacked layers, XLA:CPU copies each layer's weight slice out of the stack before its
  matmuls (~15% of a decode step at batch 32); per-layer buffers are used in place.
  """
  n = jax.tree.leaves(params["layers"])[0].shape[0]
  layers = tuple(jax.tree.map(lambda a, i=i: a[i], params["layers"]) for i in range(n))
  out = dict(params, layers=layers)
  if "lm_head" not in params:  # tied: a [D, V] copy makes the LM head a plain matmul
    e = params["embed"]
    if quant.is_quantized(params):  # the same int8 values, transposed (a scale per vocab entry)
      out["lm_head"] = {"int8": e["int8"].T, "scale": e["scale"].T}
    else:
      out["lm_head"] = e.T
  return out


def unembed(params, x_BTD, cfg):
  """The LM head; run-layout params carry an untied [D, V] copy (see unstack_layers)."""
  if cfg.tie_embeddings and "lm_head" in params:
    cfg = dataclasses.replace(cfg, tie_embeddings=False)
  return tfm.unembed(params, x_BTD, cfg)


def _dequantize(params):
  """int8 params (models.quant) run as they are (W8A8 in layers.dense, int8 rows in embed);
  only MoE expert weights, used by ragged dots, are dequantised. Identity for fp params."""
  if not quant.is_quantized(params):
    return params

  def deq(lp):
    return {k: quant.dequantize_weight(v) if k in EXPERT_WEIGHTS else v for k, v in lp.items()}

  layers = params["layers"]
  return dict(params, layers=tuple(map(deq, layers)) if isinstance(layers, tuple) else deq(layers))


def _run_layers(params, cfg, x_BTD, carry, body):
  """body(lp, layer, x, carry) -> (x, carry, ys) over the layers; returns (x, carry, stacked ys).

  Unrolled over per-layer weights (see unstack_layers), or a lax.scan over stacked ones.
  """
  if isinstance(params["layers"], tuple):
    ys = []
    for layer, lp in enumerate(params["layers"]):
      x_BTD, carry, y = body(lp, layer, x_BTD, carry)
      ys.append(y)
    return x_BTD, carry, jax.tree.map(lambda *a: jnp.stack(a), *ys)

  def step(c, xs):
    x, extra = c
    lp, layer = xs
    x, extra, ys = body(lp, layer, x, extra)
    return (x, extra), ys

  layers = jnp.arange(cfg.n_layers)
  (x_BTD, carry), ys = jax.lax.scan(step, (x_BTD, carry), (params["layers"], layers))
  return x_BTD, carry, ys


def prefill_fn(params, tokens_BT, start_B, true_length_B, sampling, ctx, *, cfg: ModelConfig):
  """Prompt forward pass of B requests; ctx = (cache, page_rows_BM) of their cached tokens."""
  TRACES["prefill"] += 1
  params = _dequantize(params)
  B, T = tokens_BT.shape
  pos_BT = start_B[:, None] + jnp.arange(T, dtype=jnp.int32)[None]
  x = tfm.embed(params, tokens_BT, cfg)

  def body(lp, layer, x, _):
    q, k, v = tfm.layer_qkv(lp, x, pos_BT, cfg)
    k_pos_BS, k_seg_BS, k_all, v_all = pos_BT, jnp.ones_like(pos_BT), k, v
    if ctx is not None:  # new tokens also see the first start_B tokens of their pages
      cache, page_rows_BM = ctx
      kc, vc = kvc.gather(cache, layer, page_rows_BM, dtype=k.dtype)
      ctx_pos_BS = jnp.broadcast_to(jnp.arange(kc.shape[1], dtype=jnp.int32), kc.shape[:2])
      k_all = jnp.concatenate([kc, k], axis=1)
      v_all = jnp.concatenate([vc, v], axis=1)
      k_pos_BS = jnp.concatenate([ctx_pos_BS, pos_BT], axis=1)
      ctx_seg_BS = (ctx_pos_BS < start_B[:, None]).astype(jnp.int32)
      k_seg_BS = jnp.concatenate([ctx_seg_BS, k_seg_BS], axis=1)
    attn = attend(
      q, k_all, v_all, q_pos_BT=pos_BT, k_pos_BS=k_pos_BS, k_seg_BS=k_seg_BS,
      impl=cfg.attention, chunk=cfg.attn_chunk,
    )  # fmt: skip
    x, _ = tfm.layer_finish(lp, x, attn, cfg)
    return x, None, (k, v)

  x, _, (k_LBTKd, v_LBTKd) = _run_layers(params, cfg, x, None, body)
  last_B = jnp.maximum(true_length_B - 1, 0)
  x_last = jnp.take_along_axis(x, last_B[:, None, None], axis=1)
  logits_BV = unembed(params, x_last, cfg)[:, 0]
  length_B = start_B + true_length_B
  token_B, logprob_B = smp.sample_logprobs(logits_BV, sampling, length_B)
  return Prefix(k_LBTKd, v_LBTKd, start_B, length_B, token_B, logprob_B, sampling)


def insert_fn(
  prefix: Prefix, state: DecodeState, slots_B, page_rows_BM, *, window=None
) -> DecodeState:
  """Writes each prefix row's K/V into its slot's pages; the slots then decode from it.

  Rows whose slot is out of range (batch padding) write nowhere.
  """
  TRACES["insert"] += 1
  L, B, T = prefix.k_LBTKd.shape[:3]
  pos_BT = prefix.start_B[:, None] + jnp.arange(T, dtype=jnp.int32)[None]
  p = state.cache.page_size
  valid_BT = (pos_BT < prefix.length_B[:, None]) & kv_evict.survives(
    pos_BT, prefix.length_B, p, window
  )
  page_BT, off_BT = kvc.write_positions(page_rows_BM, pos_BT, p, valid_BT, window)
  flat = lambda a: a.reshape(L, B * T, *a.shape[3:])
  cache = kvc.write(
    state.cache, slice(None), page_BT.reshape(-1), off_BT.reshape(-1),
    flat(prefix.k_LBTKd), flat(prefix.v_LBTKd),
  )  # fmt: skip
  samp = jax.tree.map(
    lambda a, r: a.at[slots_B].set(r, mode="drop"), state.sampling, prefix.sampling
  )
  return DecodeState(
    cache=cache,
    page_table_SM=state.page_table_SM.at[slots_B].set(page_rows_BM, mode="drop"),
    lengths_S=state.lengths_S.at[slots_B].set(prefix.length_B, mode="drop"),
    tokens_S=state.tokens_S.at[slots_B].set(prefix.token_B, mode="drop"),
    sampling=samp,
  )


def decode_attend(q_SHd, kc_SNKd, vc_SNKd, k_pos_SN, pos_S):
  """Attention of one query per slot over its cached keys at positions <= pos_S.

  Written for decode on CPU: both batched dots keep a single contracting dim and the keys are
  d-major, a layout XLA:CPU runs several times faster than the general kernel's.
  """
  S, H, d = q_SHd.shape
  K = kc_SNKd.shape[2]
  f32 = jnp.float32
  q_SKGd = q_SHd.reshape(S, K, H // K, d).astype(f32) * d**-0.5
  kT_SKdN = kc_SNKd.astype(f32).transpose(0, 2, 3, 1)
  s_SKGN = jnp.einsum("skgd,skdn->skgn", q_SKGd, kT_SKdN)
  s_SKGN = jnp.where((k_pos_SN <= pos_S[:, None])[:, None, None], s_SKGN, _NEG)
  p_SKGN = jax.nn.softmax(s_SKGN, axis=-1)  # never empty: the slot's own key is cached
  o_SKGd = jnp.einsum("skgn,sknd->skgd", p_SKGN, vc_SNKd.astype(f32).transpose(0, 2, 1, 3))
  return o_SKGd.reshape(S, 1, H, d).astype(q_SHd.dtype)


def decode_fn(params, state: DecodeState, *, cfg: ModelConfig, window=None, pages=None,
              attention: str = "gather"):  # fmt: skip
  """One decode step for every slot: feed tokens_S at lengths_S, sample the next token.

  `pages` (static) limits attention to the first `pages` page-table entries; the caller
  guarantees every live slot's tokens lie there (None: all). `attention` (static): "gather"
  copies the pages into a contiguous view and attends over it (decode_attend, the reference);
  "paged_ffi" reads them in place (models.inference.paged_attention; the caller resolves it).
  """
  TRACES["generate"] += 1
  params = _dequantize(params)
  p = state.cache.page_size
  pos_S = state.lengths_S
  page_S1, off_S1 = kvc.write_positions(
    state.page_table_SM, pos_S[:, None], p, pos_S[:, None] >= 0, window
  )
  table_SM = state.page_table_SM[:, :pages]
  k_pos_SN = kv_evict.key_positions(pos_S, table_SM.shape[1], p, window)
  x = tfm.embed(params, state.tokens_S[:, None], cfg)

  def body(lp, layer, x, cache):
    # Write, then read: each layer's in-place write depends on the previous layer's reads,
    # so XLA needs no defensive copy of the donated cache.
    q, k, v = tfm.layer_qkv(lp, x, pos_S[:, None], cfg)
    cache = kvc.write(cache, layer, page_S1[:, 0], off_S1[:, 0], k[:, 0], v[:, 0])
    if attention == "paged_ffi":
      attn = pa.decode_attend(q[:, 0], cache, layer, table_SM, k_pos_SN, pos_S)
    else:
      kc, vc = kvc.gather(cache, layer, table_SM, dtype=k.dtype)
      attn = decode_attend(q[:, 0], kc, vc, k_pos_SN, pos_S)
    x, _ = tfm.layer_finish(lp, x, attn, cfg)
    return x, cache, None

  x, cache, _ = _run_layers(params, cfg, x, state.cache, body)
  logits_SV = unembed(params, x, cfg)[:, 0]
  token_S, logprob_S = smp.sample_logprobs(logits_SV, state.sampling, pos_S + 1)
  # Idle slots keep stepping (their page rows are NULL, so writes go nowhere); cap their length.
  lengths_S = jnp.minimum(state.lengths_S + 1, cfg.max_seq_len - 1)
  new = DecodeState(cache, state.page_table_SM, lengths_S, token_S, state.sampling)
  return new, StepOutput(token_S, logprob_S)


def decode_steps_fn(params, state: DecodeState, *, cfg: ModelConfig, window=None, pages=None,
                    steps: int = 2, attention: str = "gather"):  # fmt: skip
  """`steps` decode steps in one call (one host round trip); StepOutput arrays are [steps, S]."""

  def body(st, _):
    return decode_fn(params, st, cfg=cfg, window=window, pages=pages, attention=attention)

  return jax.lax.scan(body, state, None, length=steps)


# Module-level jits (cfg static) so engines of the same config share compiled steps.
PREFILL_JIT = jax.jit(prefill_fn, static_argnames=("cfg",))
INSERT_JIT = jax.jit(insert_fn, static_argnames=("window",), donate_argnums=(1,))
GENERATE_JIT = jax.jit(
  decode_fn, static_argnames=("cfg", "window", "pages", "attention"), donate_argnums=(1,)
)
GENERATE_STEPS_JIT = jax.jit(
  decode_steps_fn,
  static_argnames=("cfg", "window", "pages", "steps", "attention"),
  donate_argnums=(1,),
)
QUANTIZE_JIT = jax.jit(quant.quantize_params)
UNSTACK_JIT = jax.jit(unstack_layers)
