"""Generation engine with JetStream's Engine API shape over a paged KV cache.

`prefill` runs a prompt (optionally on top of tokens already cached in a slot's pages) and
returns a `Prefix`; `insert` writes it into a decode slot; `generate` is ONE jitted step over
all slots (donated state) that feeds each slot's last token, writes its K/V into its pages,
attends over its page table and samples the next token with the slot's own sampling params.
Prompts are padded to power-of-two buckets, params are jit arguments, and slots come and go as
array updates, so neither new requests nor `load_params` recompile anything.

Layer layouts (measured on SmolLM2-135M, 30 layers, XLA:CPU): prefill runs a `lax.scan` over
the stacked layers (compile time flat in depth; as fast as unrolled at prompt shapes), decode
runs unrolled over per-layer buffers (a scan copies each layer's weight slice every step:
batch-1 decode 18 vs 24 tok/s). Decode variants are few (page buckets in powers of 4, steps 1 or
the generator's chunk), `warmup` compiles them ahead of time (optionally on a thread), and the
persistent compilation cache (`enable_compile_cache`) lets a second process start warm.

The host (models.generator) owns page allocation and passes each slot's page table row; the
engine never syncs with the host. Everything numeric here is a pure function.

Legend: S decode slots, M pages per slot, p page size, T prompt (bucket) length, L layers,
K kv heads, H query heads, d head_dim, D width, V vocab.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import threading

import jax
import jax.numpy as jnp
import numpy as np

from models import kv_cache as kvc
from models import kv_evict, quant
from models import sampling as smp
from models import transformer as tfm
from models.attention import attend
from models.config import ModelConfig
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


def decode_fn(params, state: DecodeState, *, cfg: ModelConfig, window=None, pages=None):
  """One decode step for every slot: feed tokens_S at lengths_S, sample the next token.

  `pages` (static) limits attention to the first `pages` page-table entries; the caller
  guarantees every live slot's tokens lie there (None: all).
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
                    steps: int = 2):  # fmt: skip
  """`steps` decode steps in one call (one host round trip); StepOutput arrays are [steps, S]."""

  def body(st, _):
    return decode_fn(params, st, cfg=cfg, window=window, pages=pages)

  return jax.lax.scan(body, state, None, length=steps)


# Module-level jits (cfg static) so engines of the same config share compiled steps.
_PREFILL_JIT = jax.jit(prefill_fn, static_argnames=("cfg",))
_INSERT_JIT = jax.jit(insert_fn, static_argnames=("window",), donate_argnums=(1,))
_GENERATE_JIT = jax.jit(decode_fn, static_argnames=("cfg", "window", "pages"), donate_argnums=(1,))
_GENERATE_STEPS_JIT = jax.jit(
  decode_steps_fn, static_argnames=("cfg", "window", "pages", "steps"), donate_argnums=(1,)
)
_QUANTIZE_JIT = jax.jit(quant.quantize_params)
_UNSTACK_JIT = jax.jit(unstack_layers)
# (engine signature, kind, shapes...) -> executable compiled ahead of time, or an Event while
# `Engine.warmup` compiles it; shared by engines of the same shapes, like the jits above.
_AOT: dict = {}
_AOT_LOCK = threading.Lock()

# ------------------------------------------------------------------------ the engine


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


def _lower(jitted: functools.partial, *args, **kwargs):
  """Lowers a functools.partial of a jit (the engine's bound steps) for these arguments."""
  return jitted.func.lower(*args, **jitted.keywords, **kwargs)


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
    weight_dtype: str = "float32",
    window: kv_evict.Window | None = None,
    version: int = 0,
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
    enable_compile_cache()
    params = self._prepare(params)
    self._shardings = jax.tree.map(lambda a: a.sharding, jax.device_put(params))
    self._set(jax.device_put(params, self._shardings))
    self.policy_version = version
    self._prefill_jit = functools.partial(_PREFILL_JIT, cfg=model_cfg)
    self._insert_jit = functools.partial(_INSERT_JIT, window=window)
    self._generate_jit = functools.partial(_GENERATE_JIT, cfg=model_cfg, window=window)
    self._generate_steps_jit = functools.partial(_GENERATE_STEPS_JIT, cfg=model_cfg, window=window)

  # -- JetStream Engine API ---------------------------------------------------------------
  def _prepare(self, params):
    if self.weight_dtype == "int8" and not quant.is_quantized(params):
      return _QUANTIZE_JIT(params)
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
    self.params, self._run_params = params, _UNSTACK_JIT(params)
    self._scan_params = dict(params, lm_head=self._run_params["lm_head"])

  def _resolve(self, params):
    return self._run_params if params is None or params is self.params else params

  def _resolve_prefill(self, params):
    return self._scan_params if params is None or params is self.params else params

  def _signature(self):
    """What, besides a call's own key, fixes the shapes of the engine's compiled steps."""
    return (self.cfg, self.window, self.max_concurrent_decodes, self.num_pages, self.page_size,
            self.pages_per_slot, self.kv_dtype, self.weight_dtype)  # fmt: skip

  def _call(self, key, own: bool, jitted, *args, **static):
    """The ahead-of-time executable for key when the engine's own params run (waiting for it
    if warmup is compiling it), else the jit."""
    exe = _AOT.get((self._signature(), *key)) if own else None
    if isinstance(exe, threading.Event):
      exe.wait()
      exe = _AOT.get((self._signature(), *key))
    return exe(*args) if exe is not None else jitted(*args, **static)

  def _compile(self, key, lower) -> None:
    """Compiles lower() into _AOT[signature, *key] unless it is there or being compiled."""
    full = (self._signature(), *key)
    with _AOT_LOCK:
      if full in _AOT:
        return
      _AOT[full] = done = threading.Event()
    try:
      _AOT[full] = lower().compile()
    except BaseException:
      del _AOT[full]
      raise
    finally:
      done.set()

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
      ctx = (context[0].cache, jnp.asarray(page_rows))
    own = params is None or params is self.params
    key = ("prefill", *tokens_BT.shape, ctx is not None)
    return self._call(
      key, own, self._prefill_jit, self._resolve_prefill(params), jnp.asarray(tokens_BT),
      jnp.asarray(start_B), jnp.asarray(true_B), rows, ctx,
    )  # fmt: skip

  def insert(self, prefix: Prefix, decode_state: DecodeState, slot, page_row) -> DecodeState:
    """Row b of prefix -> slot[b] (an int for a single request) with page_row[b] ([M] or [B, M])."""
    slots_B = np.atleast_1d(np.asarray(slot, np.int32))
    rows_BM = np.asarray(page_row, np.int32).reshape(len(slots_B), -1)
    key = ("insert", *prefix.k_LBTKd.shape[1:3])
    return self._call(
      key, True, self._insert_jit, prefix, decode_state, jnp.asarray(slots_B), jnp.asarray(rows_BM)
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
      return self._call(key, own, self._generate_jit, run, decode_state, pages=pages)
    return self._call(
      key, own, self._generate_steps_jit, run, decode_state, pages=pages, steps=steps
    )

  def attention_pages(self, n_tokens: int) -> int | None:
    """Power-of-4 bucket of the pages holding n_tokens (few decode variants to compile);
    None (all) when that is every page or with a KV window."""
    b = 1
    while b * self.page_size < n_tokens:
      b *= 4
    return None if self.window is not None or b >= self.pages_per_slot else b

  def page_buckets(self) -> list[int | None]:
    """Every value attention_pages can return."""
    out, b = [], 1
    while self.window is None and b < self.pages_per_slot:
      out.append(b)
      b *= 4
    return [*out, None]

  def warmup(self, *, prompt_buckets=(), prefill_batches=(1,), steps=(1,), buckets=None,
             background=False):  # fmt: skip
    """Compiles decode (page `buckets`, default all, x `steps`), and prefill + insert for
    each (batch, bucket), ahead of the first request. background=True returns the started
    thread (calls made meanwhile compile on their own); else returns None when done."""
    if background:
      kw = dict(prompt_buckets=prompt_buckets, prefill_batches=prefill_batches, steps=steps)
      t = threading.Thread(
        target=self.warmup,
        name="agentrl-engine-warmup",
        # Not a daemon: the interpreter joins it at exit, since a thread still compiling
        # inside XLA while Python finalises aborts the process ("terminate called ...").
        daemon=False,
        kwargs=dict(kw, buckets=buckets),
      )
      t.start()
      return t
    state = jax.eval_shape(self.init_decode_state)
    for n in sorted(steps, reverse=True):
      for pages in self.page_buckets() if buckets is None else buckets:
        jitted = self._generate_jit if n == 1 else self._generate_steps_jit
        extra = {} if n == 1 else {"steps": n}
        self._compile(
          ("generate", pages, n),
          functools.partial(_lower, jitted, self._run_params, state, pages=pages, **extra),
        )
    for B in prefill_batches:
      for T in sorted({self.bucket(t) for t in prompt_buckets}):
        i32 = jax.ShapeDtypeStruct((B,), jnp.int32)
        rows = jax.tree.map(jnp.asarray, smp.stack_params([smp.SamplingParams(greedy=True)] * B))
        args = (self._scan_params, jax.ShapeDtypeStruct((B, T), jnp.int32), i32, i32, rows, None)
        self._compile(("prefill", B, T, False), functools.partial(_lower, self._prefill_jit, *args))
        prefix = jax.eval_shape(self._prefill_jit, *args)
        rows_BM = jax.ShapeDtypeStruct((B, self.pages_per_slot), jnp.int32)
        self._compile(
          ("insert", B, T), functools.partial(_lower, self._insert_jit, prefix, state, i32, rows_BM)
        )
    return None

  def set_page_table(self, decode_state: DecodeState, page_table_SM) -> DecodeState:
    """Replaces every slot's page row (host-side allocation changed)."""
    table = jnp.asarray(np.asarray(page_table_SM, np.int32))
    return dataclasses.replace(decode_state, page_table_SM=table)
