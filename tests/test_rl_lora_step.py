"""The GRPO update with LoRA (TrainConfig.lora): only adapters move, the base is the KL
reference, adapter gradients equal the chain rule through full fine-tuning gradients,
sharded == single device, and the engine gets the merged weights."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from train_step_setup import DENSE, OPT, assert_trees_close, batch_of, run_steps, trajectories

from models import lora, transformer
from parallel.mesh import MeshConfig, make_mesh, single_device_mesh
from rl.config import LossConfig, TrainConfig
from rl.train_state import create_train_state, policy_params
from rl.train_step import compute_grads

LORA = lora.LoraConfig(rank=4, alpha=8.0, targets=("axis:heads", "axis:kv_heads", "down_proj"))
CFG = TrainConfig(loss=LossConfig(kl="k3", kl_coef=0.05), optim=OPT, lora=LORA)


def test_state_holds_frozen_base_and_adapters():
  state, sh = create_train_state(DENSE, CFG, single_device_mesh(), jax.random.key(0))
  base = transformer.init(DENSE, jax.random.key(0))
  assert state.ref_params is None  # the base is the reference: no second copy
  assert sorted(state.params) == ["w_down", "wk", "wo", "wq", "wv"]
  for a, b in zip(jax.tree.leaves(state.frozen), jax.tree.leaves(base), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  n_adapter = sum(x.size for x in jax.tree.leaves(state.params))
  assert sum(x.size for x in jax.tree.leaves(state.opt_state) if x.ndim) == 2 * n_adapter
  # B = 0 at the start: the engine's merged weights are the base's.
  for a, b in zip(jax.tree.leaves(policy_params(state, CFG)), jax.tree.leaves(base), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_adapter_grads_equal_chain_rule_of_full_grads():
  """dL/dA = scale * dL/dW @ B^T and dL/dB = scale * A^T @ dL/dW at W' = W + scale * A @ B."""
  batch = jax.tree.map(jnp.asarray, batch_of(trajectories()))
  state, _ = create_train_state(DENSE, CFG, single_device_mesh(), jax.random.key(0))
  key = jax.random.key(7)
  adapters = {  # non-zero B so both factors get gradients
    k: {"a": v["a"], "b": 0.2 * jax.random.normal(jax.random.fold_in(key, i), v["b"].shape)}
    for i, (k, v) in enumerate(sorted(state.params.items()))
  }
  g_lora, loss_lora, _ = compute_grads(
    adapters, state.frozen, batch, DENSE, CFG, frozen=state.frozen
  )
  merged = lora.merge(state.frozen, adapters, LORA)
  full_cfg = dataclasses.replace(CFG, lora=lora.LoraConfig())
  g_full, loss_full, _ = compute_grads(merged, state.frozen, batch, DENSE, full_cfg)
  np.testing.assert_allclose(float(loss_lora), float(loss_full), rtol=1e-5)
  s = LORA.scale
  for leaf, ab in adapters.items():
    a, b = np.asarray(ab["a"], np.float64), np.asarray(ab["b"], np.float64)
    L, r = a.shape[0], a.shape[-1]
    gw = np.asarray(g_full["layers"][leaf], np.float64).reshape(L, a[0].size // r, -1)
    a2, b2 = a.reshape(L, -1, r), b.reshape(L, r, -1)
    want_a = np.stack([s * gw[i] @ b2[i].T for i in range(L)]).reshape(a.shape)
    want_b = np.stack([s * a2[i].T @ gw[i] for i in range(L)]).reshape(b.shape)
    assert np.abs(want_b).max() > 0
    got_a, got_b = np.asarray(g_lora[leaf]["a"]), np.asarray(g_lora[leaf]["b"])
    np.testing.assert_allclose(got_a, want_a, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(got_b, want_b, rtol=1e-4, atol=1e-7)


def test_lora_step_sharded_equals_single_device_and_moves_only_adapters():
  batch = batch_of(trajectories())
  ref_state, ref_m, ref_losses, _ = run_steps(DENSE, CFG, single_device_mesh(), batch)
  cfg8 = dataclasses.replace(CFG, mesh=MeshConfig(data=2, fsdp=2, tensor=2))
  mesh = make_mesh(cfg8.mesh)
  state, m, losses, step = run_steps(DENSE, cfg8, mesh, batch)
  assert step._cache_size() == 1
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
  assert_trees_close(state.params, ref_state.params, rtol=1e-4, atol=1e-6)
  assert state.params["wq"]["b"].sharding.spec[2] == "tensor"  # [L, r, H, d]: heads split
  assert state.frozen["layers"]["wq"].sharding.spec[1:3] == ("fsdp", "tensor")
  base = transformer.init(DENSE, jax.random.key(0))
  for a, b in zip(jax.tree.leaves(state.frozen), jax.tree.leaves(base), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  for leaf in state.params:
    assert np.all(np.asarray(state.params[leaf]["b"]) != 0), leaf
  # Step 1 runs at B = 0 (policy == base == reference), so its KL is exactly 0; step 2's is not.
  assert float(m[0]["kl"]) == 0.0 and float(m[1]["kl"]) > 0
  merged = policy_params(state, cfg8)
  tokens = jnp.asarray(batch["tokens_BT"][:2])
  got = transformer.apply(jax.device_get(merged), tokens, DENSE)
  want = lora.apply(jax.device_get(state.frozen), jax.device_get(state.params), tokens, DENSE, LORA)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=0)
