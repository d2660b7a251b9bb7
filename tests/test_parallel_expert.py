"""Expert-parallel dispatch (experts split over `expert`) equals the single-device MoE.

The dispatch itself, and the whole model (forward, gradients), which takes the shard_map
path whenever the active mesh has expert > 1.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import moe, transformer
from models.config import tiny
from parallel import expert, sharding
from parallel.mesh import MeshConfig, make_mesh
from parallel.rules import merge_rules, use_mesh_rules

CFG = tiny(
  "qwen3_moe",
  n_experts=8,
  n_experts_per_tok=2,
  moe_d_ff=16,
  d_model=32,
  vocab_size=64,
  attn_chunk=4,
)
grouped_ffn = moe.expert_ffn


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
    w = {n: lp[n] for n in moe.EXPERT_WEIGHTS}
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


# ------------------------------------------------------------------- the whole model

# name -> (mesh config, devices it uses)
MODEL_MESHES = {
  "expert4": (MeshConfig(fsdp=1, expert=4), 4),
  "data2_expert4": (MeshConfig(data=2, fsdp=1, expert=4), 8),
}


def model_inputs(seed=0):
  params = transformer.init(CFG, jax.random.PRNGKey(seed))
  tokens_BT = jax.random.randint(jax.random.PRNGKey(seed + 1), (8, 6), 0, CFG.vocab_size)
  # Padding (segment id 0) at the ends of some rows: it must drop out of the balance stats.
  seg_BT = (jnp.arange(6)[None, :] < jnp.arange(3, 11)[:, None]).astype(jnp.int32)
  return params, tokens_BT, seg_BT


def model_loss(params, tokens_BT, seg_BT):
  """Next-token NLL over the real tokens + the MoE balance loss; aux = (logits, balance loss)."""
  logits_BTV, aux = transformer.apply(
    params, tokens_BT, CFG, segment_ids_BT=seg_BT, return_aux=True
  )
  logp_BTV = jax.nn.log_softmax(logits_BTV[:, :-1])
  nll_BT = -jnp.take_along_axis(logp_BTV, tokens_BT[:, 1:, None], axis=-1)[..., 0]
  w_BT = seg_BT[:, 1:].astype(jnp.float32)
  loss = jnp.sum(nll_BT * w_BT) / jnp.sum(w_BT) + 0.1 * aux["moe_aux_loss"]
  return loss, (logits_BTV, aux["moe_aux_loss"])


def trace(fn, mesh, *args):
  """jit(fn).trace(*args) with `mesh` active (None: no mesh).

  jit caches traces per Python function and the active mesh (read at trace time) is not part
  of its key, so each trace wraps `fn` in a new function.
  """
  with use_mesh_rules(mesh):
    return jax.jit(lambda *a: fn(*a)).trace(*args)


def run_traced(fn, mesh, params, *args):
  """(outputs, jaxpr text, StableHLO text) of one trace of jit(fn); mesh None = no mesh."""
  if mesh is not None:
    params = jax.device_put(
      params, sharding.param_shardings(transformer.param_axes(CFG), params, mesh)
    )
  traced = trace(fn, mesh, params, *args)
  lowered = traced.lower()
  return lowered.compile()(params, *args), str(traced.jaxpr), lowered.as_text()


grad_fn = jax.value_and_grad(model_loss, has_aux=True)


@pytest.fixture(scope="module")
def reference():
  """The 1-device forward and gradients, traced with no mesh (the plain MoE path)."""
  params, tokens_BT, seg_BT = model_inputs()
  out, jaxpr, _ = run_traced(grad_fn, None, params, tokens_BT, seg_BT)
  assert "shard_map" not in jaxpr
  return out


@pytest.mark.parametrize("name", list(MODEL_MESHES))
def test_model_expert_parallel_equals_single_device(name, reference):
  (want_loss, (want_logits, want_aux)), want_grads = reference
  mesh_cfg, n = MODEL_MESHES[name]
  mesh = make_mesh(mesh_cfg, devices=jax.devices()[:n])
  params, tokens_BT, seg_BT = model_inputs()
  out, jaxpr, hlo = run_traced(grad_fn, mesh, params, tokens_BT, seg_BT)
  (loss, (logits, aux)), grads = out
  # The expert MLPs ran under shard_map with explicit collectives (automatic partitioning
  # adds its collectives only after this lowering, so they cannot appear here otherwise).
  assert "shard_map" in jaxpr
  assert "all_gather" in hlo and "reduce_scatter" in hlo
  assert grads["layers"]["we_up"].sharding.spec[1] == "expert"
  # Same routing and the same fp32 arithmetic; only the order of the sums differs (the
  # reduce-scatter adds the experts' outputs per device, then across devices; XLA splits
  # the other reductions over the batch). Each sum is then off by a few ulps of its largest
  # term, so the bound is 8 fp32 ulps (eps = 1.2e-7) of each array's largest magnitude. A
  # gradient sums over every token (and head) at once, more terms in another order: 16 ulps
  # (measured: at most 6, for q_norm).
  ulp = np.finfo(np.float32).eps
  for got, want in [(loss, want_loss), (aux, want_aux), (logits, want_logits)]:
    want = np.asarray(want)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=8 * ulp * np.abs(want).max())

  def check(path, got, want):
    want = np.asarray(want)
    err = f"gradient {jax.tree_util.keystr(path)}"
    np.testing.assert_allclose(
      np.asarray(got), want, rtol=0, atol=16 * ulp * np.abs(want).max(), err_msg=err
    )

  jax.tree_util.tree_map_with_path(check, grads, want_grads)


def test_model_without_expert_axis_takes_the_plain_path():
  params, tokens_BT, seg_BT = model_inputs()
  mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
  assert not expert.active(mesh)
  traced = trace(model_loss, mesh, params, tokens_BT, seg_BT)
  assert "shard_map" not in str(traced.jaxpr)
  hlo = traced.lower().as_text()  # no collectives before XLA partitions it
  assert "all_gather" not in hlo and "reduce_scatter" not in hlo
  ep_mesh = make_mesh(MeshConfig(data=2, fsdp=1, expert=4))
  assert "shard_map" in str(trace(model_loss, ep_mesh, params, tokens_BT, seg_BT).jaxpr)
