"""The decoder forward with a prompt prefix shared by each group of rows (GRPO's G samples).

Rows come in groups of G consecutive rows whose first P tokens, positions and segment ids are
the same (one prompt, G sampled completions). Each group's prefix runs once: in every layer
the R = B / G prefix rows attend among themselves, and the suffix of each row attends to its
group's prefix keys and values and to its own. This is `transformer.apply` on the full rows
(same logits up to fp32 rounding) as long as no prefix token may attend to a suffix token,
i.e. positions grow along each sequence (`rl.layout.shared_prefix` checks it), at
(R * P + B * U) / (B * T) of the token work. Dense models only: a MoE's balance statistics
would count each prefix once instead of G times.

Legend: B rows, T tokens, R prefix rows (B / G), P prefix tokens, U suffix tokens (T - P),
N positions picked in each row, D d_model, V vocab.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp

from models import transformer as tfm
from models.attention import attend
from models.config import ModelConfig
from parallel.rules import constrain

_HEADS = ("batch", "length", "heads", "head_dim")


def apply(
  params,
  tokens_BT,
  cfg: ModelConfig,
  group: int,
  prefix: int,
  *,
  positions_BT=None,
  segment_ids_BT=None,
  logit_index_BN=None,
):
  """Logits [B, T, V] (or [B, N, V] at logit_index_BN) as `transformer.apply`, each group's
  first `prefix` tokens run once."""
  if cfg.is_moe or cfg.attention == "ring":
    raise ValueError("shared prefixes need a dense model without ring attention")
  B, T = tokens_BT.shape
  if B % group or not 0 < prefix < T:
    raise ValueError(f"{B} rows of {T} tokens: no groups of {group} with a {prefix}-token prefix")
  if positions_BT is None:
    positions_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
  if segment_ids_BT is None:
    segment_ids_BT = jnp.ones((B, T), jnp.int32)
  head = lambda a_BT: a_BT[::group, :prefix]
  tail = lambda a_BT: a_BT[:, prefix:]
  rep = lambda a_R: jnp.repeat(a_R, group, axis=0)
  pos_RP, seg_RP = head(positions_BT), head(segment_ids_BT)
  pos_BU, seg_BU = tail(positions_BT), tail(segment_ids_BT)
  att = functools.partial(attend, impl=cfg.attention, chunk=cfg.attn_chunk)
  own = functools.partial(att, q_pos_BT=pos_RP, k_pos_BS=pos_RP, q_seg_BT=seg_RP, k_seg_BS=seg_RP)
  joined = functools.partial(
    att,
    q_pos_BT=pos_BU,
    k_pos_BS=jnp.concatenate([rep(pos_RP), pos_BU], axis=1),
    q_seg_BT=seg_BU,
    k_seg_BS=jnp.concatenate([rep(seg_RP), seg_BU], axis=1),
  )

  def body(carry, lp):
    x_RPD, x_BUD = carry
    q_p, k_p, v_p = tfm.layer_qkv(lp, x_RPD, pos_RP, cfg)
    q_s, k_s, v_s = tfm.layer_qkv(lp, x_BUD, pos_BU, cfg)
    a_p = constrain(own(q_p, k_p, v_p), _HEADS)
    cat = lambda p, s: jnp.concatenate([rep(p), s], axis=1)
    a_s = constrain(joined(q_s, cat(k_p, k_s), cat(v_p, v_s)), _HEADS)
    x_RPD, _ = tfm.layer_finish(lp, x_RPD, a_p, cfg)
    x_BUD, _ = tfm.layer_finish(lp, x_BUD, a_s, cfg)
    return (x_RPD, x_BUD), None

  x0 = (tfm.embed(params, head(tokens_BT), cfg), tfm.embed(params, tail(tokens_BT), cfg))
  (x_RPD, x_BUD), _ = tfm.scan_layers(body, x0, params["layers"], cfg)
  x_BTD = jnp.concatenate([rep(x_RPD), x_BUD], axis=1)
  if logit_index_BN is not None:
    x_BTD = jnp.take_along_axis(x_BTD, logit_index_BN[..., None], axis=1)
  return tfm.unembed(params, x_BTD, cfg)
