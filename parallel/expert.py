"""Expert parallelism: the MoE expert MLPs with the experts split over the `expert` mesh axis.

Legend: B batch, T tokens, D width, E experts (E_l = E / X local ones), X expert-axis size,
k experts per token, n local tokens, M routed (token, expert) rows.

`dispatch` runs under `shard_map`. Each device all-gathers the routed tokens of its expert
group (the tokens are split over `expert` like the batch), runs only its local experts with
the grouped matmul the model passes in (`ffn`), and a reduce-scatter returns each token's
weighted sum to the device that holds it. This is dropless (no capacity factor), so it
equals the single-device MoE up to float summation order. An all-to-all dispatch moves fewer
bytes but needs a capacity (static shapes) and then drops tokens, which would break that
equality; at the sizes this project trains the gather costs little.

The model keeps the router, the routing and the expert math (models/moe.py: `moe_mlp`
calls `dispatch` with `expert_ffn` whenever `active()`); this module owns only the
collective layout, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from parallel.rules import current_mesh, logical_to_spec

AXIS = "expert"


def active(mesh=None) -> bool:
  """True when a mesh with an expert axis larger than 1 is active."""
  mesh = mesh if mesh is not None else current_mesh()
  return mesh is not None and mesh.shape.get(AXIS, 1) > 1


def _axes(entry) -> tuple[str, ...]:
  return (entry,) if isinstance(entry, str) else tuple(entry or ())


def _local_experts(x_ND, gates_Nk, experts_Nk, w_local, ffn, n_local: int):
  """Weighted output of this device's experts for every token row given (0 for others)."""
  N, k = experts_Nk.shape
  first = jax.lax.axis_index(AXIS) * n_local
  local_Nk = experts_Nk - first
  mine_Nk = (local_Nk >= 0) & (local_Nk < n_local)
  key_M = jnp.where(mine_Nk, local_Nk, n_local).reshape(-1)
  # At most N * min(k, E_l) rows are local (top-k experts are distinct): no drops.
  order_M = jnp.argsort(key_M, stable=True)[: N * min(k, n_local)]
  sizes_E = jnp.bincount(key_M, length=n_local + 1)[:n_local].astype(jnp.int32)
  token_M = order_M // k
  y_MD = ffn(jnp.take(x_ND, token_M, axis=0), w_local, sizes_E)
  gate_M = jnp.where(
    jnp.take(mine_Nk.reshape(-1), order_M), jnp.take(gates_Nk.reshape(-1), order_M), 0
  )
  y_MD = y_MD * gate_M[:, None].astype(y_MD.dtype)
  return jnp.zeros_like(x_ND).at[token_M].add(y_MD)


def dispatch(
  x_BTD,
  gates_BTk,
  experts_BTk,
  weights: Mapping[str, jax.Array],
  ffn: Callable,
  mesh=None,
):
  """y_BTD = sum_j gates[..., j] * expert_{experts[..., j]}(x), experts split over `expert`.

  weights: expert weights with a leading E axis (e.g. we_gate [E,D,F]); ffn(xs_MD,
  local_weights, sizes_El) -> y_MD is the model's grouped matmul over rows sorted by expert.
  """
  mesh = mesh if mesh is not None else current_mesh()
  if not active(mesh):
    raise ValueError("parallel.expert.dispatch needs an active mesh with expert > 1")
  n_experts = next(iter(weights.values())).shape[0]
  X = mesh.shape[AXIS]
  if n_experts % X:
    raise ValueError(f"{n_experts} experts do not divide over the expert axis of size {X}")
  tok_spec = logical_to_spec(("batch", "length", None), mesh=mesh)
  split = AXIS in _axes(tok_spec[0]) or AXIS in _axes(tok_spec[1])
  w_specs = {name: PartitionSpec(AXIS) for name in weights}
  k = experts_BTk.shape[-1]

  def body(x_btD, g_btk, e_btk, w_local):
    b, t, D = x_btD.shape
    x_ND, g_Nk, e_Nk = x_btD.reshape(-1, D), g_btk.reshape(-1, k), e_btk.reshape(-1, k)
    if split:  # gather the expert group's tokens (order = device order along `expert`)
      x_ND, g_Nk, e_Nk = (jax.lax.all_gather(a, AXIS, tiled=True) for a in (x_ND, g_Nk, e_Nk))
    y_ND = _local_experts(x_ND, g_Nk, e_Nk, w_local, ffn, n_experts // X)
    if split:
      y_ND = jax.lax.psum_scatter(y_ND, AXIS, scatter_dimension=0, tiled=True)
    else:
      y_ND = jax.lax.psum(y_ND, AXIS)
    return y_ND.reshape(b, t, D)

  return jax.shard_map(
    body,
    mesh=mesh,
    in_specs=(tok_spec, tok_spec, tok_spec, w_specs),
    out_specs=tok_spec,
  )(x_BTD, gates_BTk, experts_BTk, dict(weights))
