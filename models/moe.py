"""Mixture-of-experts SwiGLU MLP: top-k softmax router, dropless grouped matmuls.

Routing follows Hugging Face (Mixtral / Qwen3-MoE): softmax over the router logits in
fp32, keep the top k, optionally renormalise them to sum to one. Tokens are sorted by
expert and run through `expert_ffn` (grouped matmuls with `jax.lax.ragged_dot`: no
capacity, no drops), then scattered back weighted by their gate. When a mesh with an
`expert` axis larger than 1 is active, `parallel.expert.dispatch` runs the same `expert_ffn`
with the experts split over that axis instead. The load-balancing statistics are returned
so the caller can form HF's auxiliary loss over all layers.

Legend: B batch, T tokens, N = B*T, D d_model, F moe_d_ff, E experts, k experts per token.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from models.config import ModelConfig
from parallel import expert
from parallel.rules import constrain

EXPERT_WEIGHTS = ("we_gate", "we_up", "we_down")


def route(x_ND, w_router_DE, top_k: int, norm_topk: bool):
  """Returns (gates_Nk in x's dtype, experts_Nk int32, probs_NE fp32)."""
  logits_NE = jnp.einsum("nd,de->ne", x_ND, w_router_DE.astype(x_ND.dtype))
  probs_NE = jax.nn.softmax(logits_NE.astype(jnp.float32), axis=-1)
  gates_Nk, experts_Nk = jax.lax.top_k(probs_NE, top_k)
  if norm_topk:
    gates_Nk = gates_Nk / jnp.sum(gates_Nk, axis=-1, keepdims=True)
  return gates_Nk.astype(x_ND.dtype), experts_Nk.astype(jnp.int32), probs_NE


def balance_stats(experts_Nk, probs_NE, valid_N):
  """Per-layer sums for HF's load-balancing loss: [3, E] = (assignments, probs, count)."""
  E = probs_NE.shape[-1]
  w_N = valid_N.astype(jnp.float32)
  counts_E = jnp.sum(jax.nn.one_hot(experts_Nk, E, dtype=jnp.float32) * w_N[:, None, None], (0, 1))
  prob_E = jnp.sum(probs_NE * w_N[:, None], axis=0)
  n_E = jnp.broadcast_to(jnp.sum(w_N), (E,))
  return jnp.stack([counts_E, prob_E, n_E])


def aux_loss(stats_3E):
  """HF `load_balancing_loss_func`: E * sum_e f_e * P_e over the accumulated stats."""
  counts_E, prob_E, n_E = stats_3E
  n = jnp.maximum(n_E[0], 1.0)
  return counts_E.shape[0] * jnp.sum((counts_E / n) * (prob_E / n))


def expert_ffn(xs_MD, w, sizes_E):
  """Grouped SwiGLU of rows sorted by expert; w: we_gate/we_up [E,D,F], we_down [E,F,D]."""
  dt = xs_MD.dtype
  g_MF = jax.lax.ragged_dot(xs_MD, w["we_gate"].astype(dt), sizes_E)
  u_MF = jax.lax.ragged_dot(xs_MD, w["we_up"].astype(dt), sizes_E)
  return jax.lax.ragged_dot(jax.nn.silu(g_MF) * u_MF, w["we_down"].astype(dt), sizes_E)


def combine_experts(x_ND, gates_Nk, experts_Nk, w, n_experts: int):
  """sum_j gates[:, j] * expert_{experts[:, j]}(x) with every expert on this device."""
  k = experts_Nk.shape[-1]
  flat_M = experts_Nk.reshape(-1)  # M = N * k assignments
  order_M = jnp.argsort(flat_M, stable=True)
  token_M = order_M // k
  sizes_E = jnp.bincount(flat_M, length=n_experts).astype(jnp.int32)
  y_MD = expert_ffn(jnp.take(x_ND, token_M, axis=0), w, sizes_E)
  y_MD = y_MD * jnp.take(gates_Nk.reshape(-1), order_M)[:, None]
  return jnp.zeros_like(x_ND).at[token_M].add(y_MD)


def moe_mlp(x_BTD, lp, cfg: ModelConfig, valid_BT=None):
  """Returns (y_BTD, stats_3E). `lp` holds router [D,E], we_gate/we_up [E,D,F], we_down [E,F,D].

  Expert-parallel (`parallel.expert.dispatch`) when the active mesh has expert > 1.
  """
  B, T, D = x_BTD.shape
  k = cfg.n_experts_per_tok
  x_ND = x_BTD.reshape(B * T, D)
  gates_Nk, experts_Nk, probs_NE = route(x_ND, lp["router"], k, cfg.norm_topk_prob)
  valid_N = jnp.ones((B * T,), bool) if valid_BT is None else valid_BT.reshape(B * T)
  stats = balance_stats(experts_Nk, probs_NE, valid_N)
  w = {name: lp[name] for name in EXPERT_WEIGHTS}
  if expert.active():
    gates_BTk, experts_BTk = gates_Nk.reshape(B, T, k), experts_Nk.reshape(B, T, k)
    y_BTD = expert.dispatch(x_BTD, gates_BTk, experts_BTk, w, expert_ffn)
  else:
    y_BTD = combine_experts(x_ND, gates_Nk, experts_Nk, w, cfg.n_experts).reshape(B, T, D)
  return constrain(y_BTD, ("batch", "length", "act_embed")), stats
