"""Expert-parallel dispatch (experts split over `expert`) equals the single-device MoE."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import moe
from models.config import tiny
from parallel import expert
from parallel.mesh import MeshConfig, make_mesh
from parallel.rules import merge_rules, use_mesh_rules

CFG = tiny("qwen3_moe", n_experts=8, n_experts_per_tok=2, moe_d_ff=16, d_model=32)


def grouped_ffn(xs_MD, w, sizes_E):
  """The model's grouped SwiGLU (models/moe.py) over rows sorted by expert."""
  g = jax.lax.ragged_dot(xs_MD, w["we_gate"], sizes_E)
  u = jax.lax.ragged_dot(xs_MD, w["we_up"], sizes_E)
  return jax.lax.ragged_dot(jax.nn.silu(g) * u, w["we_down"], sizes_E)


def setup(seed=0):
  k = jax.random.split(jax.random.key(seed), 5)
  E, D, F = CFG.n_experts, CFG.d_model, CFG.moe_d_ff
  lp = {
    "router": jax.random.normal(k[0], (D, E)) * 0.3,
    "we_gate": jax.random.normal(k[1], (E, D, F)) * 0.2,
    "we_up": jax.random.normal(k[2], (E, D, F)) * 0.2,
    "we_down": jax.random.normal(k[3], (E, F, D)) * 0.2,
  }
  x = jax.random.normal(k[4], (8, 6, D))
  return lp, x


def ep_mlp(x, lp, mesh, rules=None):
  with use_mesh_rules(mesh, rules):
    B, T, D = x.shape
    g, e, _ = moe.route(
      x.reshape(B * T, D), lp["router"], CFG.n_experts_per_tok, CFG.norm_topk_prob
    )
    w = {n: lp[n] for n in ("we_gate", "we_up", "we_down")}
    k = CFG.n_experts_per_tok
    return expert.dispatch(x, g.reshape(B, T, k), e.reshape(B, T, k), w, grouped_ffn)


@pytest.mark.parametrize(
  "mesh_cfg,rules",
  [
    (MeshConfig(data=2, fsdp=1, expert=4), None),
    (MeshConfig(fsdp=1, expert=8), None),
    (MeshConfig(data=2, fsdp=1, expert=4), ["batch=data"]),  # tokens not split over expert
  ],
)
def test_dispatch_equals_single_device_moe(mesh_cfg, rules):
  lp, x = setup()
  want, _ = moe.moe_mlp(x, lp, CFG)
  mesh = make_mesh(mesh_cfg)
  rules = merge_rules(overrides=rules or ())
  got = jax.jit(lambda x, lp: ep_mlp(x, lp, mesh, rules))(x, lp)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_dispatch_gradients_equal_single_device():
  lp, x = setup(1)
  mesh = make_mesh(MeshConfig(data=2, fsdp=1, expert=4))
  loss_ref = lambda x, lp: jnp.sum(jnp.sin(moe.moe_mlp(x, lp, CFG)[0]))
  loss_ep = lambda x, lp: jnp.sum(jnp.sin(ep_mlp(x, lp, mesh)))
  want = jax.grad(loss_ref, argnums=(0, 1))(x, lp)
  got = jax.jit(jax.grad(loss_ep, argnums=(0, 1)))(x, lp)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    # Sums over tokens run in another order (reduce-scatter vs one scatter-add), so the
    # error is fp32 rounding of the largest terms: absolute, scaled by the array's range.
    b = np.asarray(b)
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6 * np.abs(b).max())


def test_errors():
  lp, x = setup()
  w = {n: lp[n] for n in ("we_gate", "we_up", "we_down")}
  g = jnp.zeros((8, 6, 2))
  with pytest.raises(ValueError, match="active mesh with expert > 1"):
    expert.dispatch(x, g, g.astype(jnp.int32), w, grouped_ffn)
  mesh = make_mesh(MeshConfig(data=-1, fsdp=1, expert=8))
  w3 = {n: v[:3] for n, v in w.items()}
  with pytest.raises(ValueError, match="3 experts do not divide over the expert axis of size 8"):
    expert.dispatch(x, g, g.astype(jnp.int32), w3, grouped_ffn, mesh=mesh)
