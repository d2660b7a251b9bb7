"""Decoder-only transformer (Llama 3, Qwen2, Qwen3, Qwen3-MoE, Mixtral) as pure functions.

`params` is a plain nested dict of arrays. Per-layer weights are stacked on a leading
'layers' axis and the stack runs under `jax.lax.scan`, so compile time does not grow with
depth. `apply` is composed of `embed`, `layer_qkv`, `attend`, `layer_finish` and
`unembed`; a cached decoder built from the same pieces computes the same function.

Legend: B batch, T tokens, V vocab, D d_model, H heads, K kv heads, d head_dim,
F d_ff, E experts, L layers, N positions picked in each row.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from models import moe, quant, rope
from models.attention import attend
from models.config import ModelConfig
from models.layers import dense, dtype_of, rms_norm, swiglu
from parallel import ring_attention, zigzag
from parallel.rules import constrain, current_mesh

_ACT_BTD = ("batch", "length", "act_embed")


def _layer_shapes(cfg: ModelConfig) -> dict[str, tuple[tuple[int, ...], tuple[str, ...]]]:
  """name -> (shape without the layer axis, logical axes) of one layer's weights."""
  D, H, K, d = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
  s = {
    "attn_norm": ((D,), ("embed",)),
    "wq": ((D, H, d), ("embed", "heads", "head_dim")),
    "wk": ((D, K, d), ("embed", "kv_heads", "head_dim")),
    "wv": ((D, K, d), ("embed", "kv_heads", "head_dim")),
    "wo": ((H, d, D), ("heads", "head_dim", "embed")),
    "mlp_norm": ((D,), ("embed",)),
  }
  if cfg.attn_bias:
    s["bq"] = ((H, d), ("heads", "head_dim"))
    s["bk"] = ((K, d), ("kv_heads", "head_dim"))
    s["bv"] = ((K, d), ("kv_heads", "head_dim"))
  if cfg.attn_out_bias:
    s["bo"] = ((D,), ("embed",))
  if cfg.qk_norm:
    s["q_norm"] = ((d,), ("head_dim",))
    s["k_norm"] = ((d,), ("head_dim",))
  if cfg.is_moe:
    E, F = cfg.n_experts, cfg.moe_d_ff
    s["router"] = ((D, E), ("embed", "experts"))
    s["we_gate"] = ((E, D, F), ("experts", "embed", "mlp"))
    s["we_up"] = ((E, D, F), ("experts", "embed", "mlp"))
    s["we_down"] = ((E, F, D), ("experts", "mlp", "embed"))
  else:
    F = cfg.d_ff
    s["w_gate"] = ((D, F), ("embed", "mlp"))
    s["w_up"] = ((D, F), ("embed", "mlp"))
    s["w_down"] = ((F, D), ("mlp", "embed"))
  return s


def _top_shapes(cfg: ModelConfig):
  s = {
    "embed": ((cfg.vocab_size, cfg.d_model), ("vocab", "embed")),
    "final_norm": ((cfg.d_model,), ("embed",)),
  }
  if not cfg.tie_embeddings:
    s["lm_head"] = ((cfg.d_model, cfg.vocab_size), ("embed", "vocab"))
  return s


def param_axes(cfg: ModelConfig):
  """Logical axis names of every parameter (same tree structure as `init`)."""
  axes = {k: ax for k, (_, ax) in _top_shapes(cfg).items()}
  axes["layers"] = {k: ("layers", *ax) for k, (_, ax) in _layer_shapes(cfg).items()}
  return axes


def param_shapes(cfg: ModelConfig):
  """Shapes of every parameter (same tree structure as `init`)."""
  shapes = {k: sh for k, (sh, _) in _top_shapes(cfg).items()}
  shapes["layers"] = {k: (cfg.n_layers, *sh) for k, (sh, _) in _layer_shapes(cfg).items()}
  return shapes


@functools.partial(jax.jit, static_argnums=0)
def init(cfg: ModelConfig, key: jax.Array):
  """Random parameters: N(0, 0.02) matrices (as HF's initializer_range), unit norms, zero biases.

  Jitted (one compile per config); wrap in `jax.jit(..., out_shardings=...)` to create
  the parameters already sharded.
  """
  pdt = dtype_of(cfg.param_dtype)
  flat, treedef = jax.tree.flatten_with_path(
    param_shapes(cfg), is_leaf=lambda x: isinstance(x, tuple)
  )
  kinds = [
    "norm" if p[-1].key.endswith("norm") else "bias" if p[-1].key.startswith("b") else "weight"
    for p, _ in flat
  ]
  # One normal draw sliced into every matrix: compiles ~20x faster than a draw per leaf.
  sizes = [
    math.prod(sh) if kind == "weight" else 0 for (_, sh), kind in zip(flat, kinds, strict=True)
  ]
  noise = 0.02 * jax.random.normal(key, (sum(sizes),), jnp.float32)
  leaves, offset = [], 0
  for (_, shape), kind, n in zip(flat, kinds, sizes, strict=True):
    if kind == "weight":
      leaves.append(noise[offset : offset + n].reshape(shape).astype(pdt))
    else:
      leaves.append((jnp.ones if kind == "norm" else jnp.zeros)(shape, pdt))
    offset += n
  return jax.tree.unflatten(treedef, leaves)


# ------------------------------------------------------------------- pieces


def embed(params, tokens_BT, cfg: ModelConfig):
  # An int8 table (models.quant) is dequantised only at the rows looked up.
  rows = jax.tree.map(lambda a: jnp.take(a, tokens_BT, axis=0), params["embed"])
  x_BTD = quant.dequantize_weight(rows).astype(dtype_of(cfg.dtype))
  return constrain(x_BTD, _ACT_BTD)


def layer_qkv(lp, x_BTD, positions_BT, cfg: ModelConfig):
  """Pre-norm, q/k/v projections (+bias), q/k RMSNorm (Qwen3) and RoPE."""
  dt = x_BTD.dtype
  h_BTD = rms_norm(x_BTD, lp["attn_norm"], cfg.norm_eps)
  q, k, v = dense(h_BTD, lp["wq"]), dense(h_BTD, lp["wk"]), dense(h_BTD, lp["wv"])
  if cfg.attn_bias:
    q, k, v = (a + lp[b].astype(dt)[None, None] for a, b in ((q, "bq"), (k, "bk"), (v, "bv")))
  if cfg.qk_norm:
    q = rms_norm(q, lp["q_norm"], cfg.norm_eps)
    k = rms_norm(k, lp["k_norm"], cfg.norm_eps)
  cos_BTd, sin_BTd = rope.cos_sin(positions_BT, cfg)
  q_BTHd = constrain(rope.apply_rope(q, cos_BTd, sin_BTd), ("batch", "length", "heads", "head_dim"))
  k_BTKd = constrain(
    rope.apply_rope(k, cos_BTd, sin_BTd), ("batch", "length", "kv_heads", "head_dim")
  )
  v_BTKd = constrain(v, ("batch", "length", "kv_heads", "head_dim"))
  return q_BTHd, k_BTKd, v_BTKd


def _finish(lp, x_BTD, attn_BTHd, cfg: ModelConfig, valid_BT=None):
  """layer_finish plus the MoE balance statistics [3, E] (zeros [3, 1] when dense)."""
  dt = x_BTD.dtype
  o_BTD = dense(attn_BTHd.astype(dt), lp["wo"], n_in=2)
  if cfg.attn_out_bias:
    o_BTD = o_BTD + lp["bo"].astype(dt)[None, None]
  x_BTD = constrain(x_BTD + o_BTD, _ACT_BTD)
  h_BTD = rms_norm(x_BTD, lp["mlp_norm"], cfg.norm_eps)
  if cfg.is_moe:
    y_BTD, stats = moe.moe_mlp(h_BTD, lp, cfg, valid_BT)
  else:
    y_BTD, stats = swiglu(h_BTD, lp["w_gate"], lp["w_up"], lp["w_down"]), jnp.zeros((3, 1))
  return constrain(x_BTD + y_BTD, _ACT_BTD), stats


def layer_finish(lp, x_BTD, attn_BTHd, cfg: ModelConfig):
  """Out-projection + residual + MLP/MoE + residual; returns (x_BTD, this layer's aux loss)."""
  x_BTD, stats = _finish(lp, x_BTD, attn_BTHd, cfg)
  return x_BTD, (moe.aux_loss(stats) if cfg.is_moe else jnp.zeros((), jnp.float32))


def unembed(params, x_BTD, cfg: ModelConfig):
  """Final RMSNorm and the LM head (tied or not); logits in fp32."""
  h_BTD = rms_norm(x_BTD, params["final_norm"], cfg.norm_eps)
  if cfg.tie_embeddings:
    logits = dense(h_BTD, params["embed"], out_dtype=jnp.float32, transpose_w=True)
  else:
    logits = dense(h_BTD, params["lm_head"], out_dtype=jnp.float32)
  return constrain(logits, ("batch", "length", "vocab"))


# ------------------------------------------------------------------- full model


def _remat(fn, kind: str):
  if kind == "none":
    return fn
  policy = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "save_dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
  }[kind]
  return jax.checkpoint(fn, policy=policy, prevent_cse=False)


def scan_layers(body, carry, layers, cfg: ModelConfig):
  """lax.scan of body(carry, layer params) over the stacked layers, with cfg's remat policy
  and `scan_unroll` layers per loop iteration (n_layers: no loop at all)."""
  return jax.lax.scan(
    _remat(body, cfg.remat), carry, layers, unroll=min(cfg.scan_unroll, cfg.n_layers)
  )


def _ring_layout(tokens_BT, positions_BT, segment_ids_BT, n: int, chunk: int):
  """Pads rows for an n-device ring and permutes them into its zig-zag order.

  Each of the 2n zig-zag chunks becomes c rows of `chunk`-balanced length (padding < 2n * k
  tokens for k key chunks per half block); padded tokens get segment 0 and are never seen.
  Returns (tokens, positions, segment ids, key chunk) in zig-zag order.
  """
  T = tokens_BT.shape[1]
  half = -(-T // (2 * n))
  k = -(-half // chunk)
  c = -(-half // k)
  extra = 2 * n * k * c - T
  if segment_ids_BT is None:
    segment_ids_BT = jnp.ones_like(tokens_BT, jnp.int32)
  pad = lambda a, **kw: jnp.pad(a, ((0, 0), (0, extra)), **kw)
  padded = (pad(tokens_BT), pad(positions_BT, mode="edge"), pad(segment_ids_BT))
  return (*(zigzag.to_zigzag(a, n) for a in padded), c)


def _ring_mesh(cfg: ModelConfig):
  """The active mesh if cfg asks for ring attention and the mesh has sequence > 1."""
  mesh = current_mesh() if cfg.attention == "ring" else None
  return mesh if mesh is not None and mesh.shape.get("sequence", 1) > 1 else None


def apply(
  params,
  tokens_BT,
  cfg: ModelConfig,
  *,
  positions_BT=None,
  segment_ids_BT=None,
  return_aux=False,
  logit_index_BN=None,
):
  """Logits [B, T, V] (fp32) for `tokens_BT`.

  Args:
    positions_BT: RoPE / causality positions (default 0..T-1 in every row; restart them
      per segment for packed sequences).
    segment_ids_BT: packed-sequence ids; tokens attend only inside their segment and
      id 0 marks padding (ignored by attention and by the MoE balance loss).
    return_aux: also return {'moe_aux_loss': HF's load-balancing loss (unscaled by
      cfg.router_aux_coef; 0 for dense models)}.
    logit_index_BN: if given, the LM head runs only at these indices of each row (in [0, T))
      and the logits are [B, N, V]: logits[b, n] = full logits[b, logit_index_BN[b, n]].

  With cfg.attention == 'ring' under a mesh whose `sequence` axis is > 1, the rows are padded
  and permuted into the ring's zig-zag layout once, every layer attends with
  `parallel.ring_attention`, and the hidden states are permuted back before the LM head:
  inputs and outputs stay in natural order. Without such a mesh 'ring' is chunked attention.
  """
  B, T = tokens_BT.shape
  if positions_BT is None:
    positions_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
  mesh = _ring_mesh(cfg)
  if mesh is not None:
    n = mesh.shape["sequence"]
    tokens_BT, positions_BT, segment_ids_BT, chunk = _ring_layout(
      tokens_BT, positions_BT, segment_ids_BT, n, cfg.attn_chunk
    )
    attn_fn = functools.partial(
      ring_attention.ring_attention,
      mesh=mesh,
      positions_BT=positions_BT,
      segment_ids_BT=segment_ids_BT,
      chunk=chunk,
    )
  else:
    attn_fn = functools.partial(
      attend,
      q_pos_BT=positions_BT,
      k_pos_BS=positions_BT,
      q_seg_BT=segment_ids_BT,
      k_seg_BS=segment_ids_BT,
      impl=cfg.attention,
      chunk=cfg.attn_chunk,
    )
  valid_BT = None if segment_ids_BT is None else segment_ids_BT != 0

  def body(carry, lp):
    x_BTD, stats = carry
    q, k, v = layer_qkv(lp, x_BTD, positions_BT, cfg)
    attn = constrain(attn_fn(q, k, v), ("batch", "length", "heads", "head_dim"))
    x_BTD, layer_stats = _finish(lp, x_BTD, attn, cfg, valid_BT)
    return (x_BTD, stats + layer_stats), None

  stats0 = jnp.zeros((3, cfg.n_experts if cfg.is_moe else 1), jnp.float32)
  x_BTD = embed(params, tokens_BT, cfg)
  (x_BTD, stats), _ = scan_layers(body, (x_BTD, stats0), params["layers"], cfg)
  if mesh is not None:
    x_BTD = constrain(zigzag.from_zigzag(x_BTD, n)[:, :T], _ACT_BTD)
  if logit_index_BN is not None:
    x_BTD = jnp.take_along_axis(x_BTD, logit_index_BN[..., None], axis=1)
  logits_BTV = unembed(params, x_BTD, cfg)
  if not return_aux:
    return logits_BTV
  aux = moe.aux_loss(stats) if cfg.is_moe else jnp.zeros((), jnp.float32)
  return logits_BTV, {"moe_aux_loss": aux}
