"""The jitted update: sharded == 1 device, compiles once, deterministic, accumulation exact."""

import dataclasses
import functools

import jax
import numpy as np
import pytest
from train_step_setup import (
  DENSE,
  FAST,
  OPT,
  assert_trees_close,
  batch_of,
  grpo_batch,
  run_steps,
  trajectories,
)

from models import transformer
from models.config import tiny
from parallel.mesh import MeshConfig, make_mesh, single_device_mesh
from rl.batch import build_batch
from rl.config import LossConfig, OptimConfig, TrainConfig
from rl.layout import Layout, logit_count, plan, shared_prefix
from rl.runtime.records import Group
from rl.train_state import create_train_state
from rl.train_step import compute_grads, make_compute_logprobs, make_train_step, target_mask

MOE = tiny(
  "qwen3_moe",
  vocab_size=64,
  d_model=32,
  n_heads=4,
  n_kv_heads=2,
  head_dim=8,
  n_experts=4,
  moe_d_ff=16,
)


def test_sharded_step_equals_single_device_compiles_once_and_is_deterministic():
  cfg = TrainConfig(loss=LossConfig(kl="k3", kl_coef=0.05), optim=OPT)
  batch = batch_of(trajectories())
  ref_state, ref_m, ref_losses, _ = run_steps(DENSE, cfg, single_device_mesh(), batch)
  cfg8 = dataclasses.replace(cfg, mesh=MeshConfig(data=2, fsdp=2, tensor=2))
  mesh = make_mesh(cfg8.mesh)
  state, m, losses, step = run_steps(DENSE, cfg8, mesh, batch)
  assert step._cache_size() == 1  # the second call did not retrace
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
  assert_trees_close(m, ref_m, rtol=1e-4, atol=1e-6)
  assert_trees_close(state.params, ref_state.params, rtol=1e-4, atol=1e-6)
  assert state.params["layers"]["wq"].sharding.spec[1:3] == ("fsdp", "tensor")
  assert int(state.step) == 2 and ref_losses[1] < ref_losses[0]
  # Determinism: a fresh state through the same compiled step gives bit-identical losses.
  state2, shardings = create_train_state(DENSE, cfg8, mesh, jax.random.key(0))
  again = []
  for _ in range(2):
    state2, m2 = step(state2, batch)
    again.append(float(m2["loss"]))
  assert again == losses
  assert step._cache_size() == 1


@functools.lru_cache
def _moe_reference():
  """The 1-device GRPO step of MOE: (batch, state, metrics, losses, step)."""
  batch = batch_of(trajectories(seed=1))
  return (batch, *run_steps(MOE, TrainConfig(optim=OPT), single_device_mesh(), batch, n=1))


@pytest.mark.parametrize(
  "mesh_cfg", [MeshConfig(data=2, fsdp=1, expert=4), MeshConfig(fsdp=2, expert=4)]
)
def test_moe_expert_parallel_step_equals_single_device(mesh_cfg):
  batch, ref_state, ref_m, ref_losses, ref_step = _moe_reference()
  cfg8 = TrainConfig(optim=OPT, mesh=mesh_cfg)
  state, m, losses, step = run_steps(MOE, cfg8, make_mesh(cfg8.mesh), batch, n=1)
  # The MoE layers run through parallel.expert.dispatch (shard_map) only on the expert mesh.
  assert "shard_map" in str(step.trace(state, batch).jaxpr)
  assert "shard_map" not in str(ref_step.trace(ref_state, batch).jaxpr)
  assert state.params["layers"]["we_up"].sharding.spec[1] == "expert"
  assert float(m[-1]["moe_aux_loss"]) > 0
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
  assert_trees_close(m, ref_m, rtol=1e-4, atol=1e-6)
  assert_trees_close(state.params, ref_state.params, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def params():
  state, _ = create_train_state(DENSE, TrainConfig(), single_device_mesh(), jax.random.key(1))
  return state.params


@functools.lru_cache
def _grads_fn(loss_cfg, micro, model_cfg):
  cfg = TrainConfig(loss=loss_cfg, micro_batches=micro)
  return jax.jit(lambda p, r, b: compute_grads(p, r, b, model_cfg, cfg), compiler_options=FAST)


def grads_of(params, batch, loss_cfg, micro=1, ref_params=None, model_cfg=DENSE):
  """(grads, loss, metrics); one compile per (config, batch keys and shapes)."""
  return _grads_fn(loss_cfg, micro, model_cfg)(params, ref_params, batch)


RICH = LossConfig(
  aggregation="seq-mean-token-mean",
  kl="k2",
  kl_coef=0.1,
  overlong="mask",
  decoupled=True,
  is_cap=1.5,
)


def test_accumulated_equals_single_batch_and_given_logprobs_equal_computed(params):
  """One batch (reference and proximal forwards inside) == four micro-batches fed the
  reference and proximal log-probs computed up front by compute_logprobs."""
  batch = batch_of(trajectories(seed=2))
  ref = jax.tree.map(lambda x: x * 0.9, params)  # a reference policy unlike the current one
  g1, l1, m1 = grads_of(params, batch, RICH, micro=1, ref_params=ref)
  p_sh = jax.tree.map(lambda x: x.sharding, params)
  logprobs = make_compute_logprobs(DENSE, TrainConfig(), single_device_mesh(), p_sh, batch)
  given = dict(
    batch, ref_logprobs_BT=logprobs(ref, batch), prox_logprobs_BT=logprobs(params, batch)
  )
  g4, l4, m4 = grads_of(params, given, RICH, micro=4)
  assert float(m1["kl"]) > 0 and float(m1["is_weight"]) > 0
  np.testing.assert_allclose(float(l4), float(l1), rtol=1e-5)
  assert_trees_close(g4, g1, rtol=1e-4, atol=1e-7)
  assert_trees_close(m4, m1, rtol=1e-5, atol=1e-6)


def test_packed_equals_unpacked(params):
  cfg = LossConfig(
    advantage="rloo",
    aggregation="seq-mean-token-mean",
    policy_loss="gspo",
    decoupled=True,
    is_level="sequence",
  )
  trajs = trajectories(seed=3)
  packed, unpacked = batch_of(trajs, max_segments=4), batch_of(trajs, max_segments=1, rows=16)
  assert packed["tokens_BT"].shape[0] < unpacked["tokens_BT"].shape[0]
  gp, lp, mp = grads_of(params, packed, cfg)
  gu, lu, mu = grads_of(params, unpacked, cfg)
  np.testing.assert_allclose(float(lp), float(lu), rtol=1e-5)
  assert_trees_close(gp, gu, rtol=1e-4, atol=1e-7)
  assert_trees_close(mp, mu, rtol=1e-5, atol=1e-6)


def test_overlong_mask_and_penalty_equivalences(params):
  trajs = trajectories(seed=5)
  batch = batch_of(trajs)
  masked = grads_of(params, batch, LossConfig(overlong="mask"))
  by_hand = dict(batch)
  seg, trunc = batch["segment_ids_BT"], batch["truncated_BS"]
  drop = np.take_along_axis(trunc, np.clip(seg - 1, 0, None), axis=1) & (seg > 0)
  by_hand["loss_mask_BT"] = np.where(drop, 0.0, batch["loss_mask_BT"]).astype(np.float32)
  plain = grads_of(params, by_hand, LossConfig())
  assert trunc.any()
  np.testing.assert_allclose(float(masked[1]), float(plain[1]), rtol=1e-6)
  assert_trees_close(masked[0], plain[0], rtol=1e-5, atol=1e-8)
  # Soft penalty == rewards shaped by hand with DAPO's formula (L_max 8, buffer 4).
  pen = grads_of(
    params, batch, LossConfig(overlong="penalty", overlong_max_len=8, overlong_buffer=4)
  )
  shaped = dict(batch, rewards_BS=batch["rewards_BS"].copy())
  for r, s in zip(*np.nonzero(batch["group_ids_BS"] >= 0), strict=True):
    n = batch["loss_mask_BT"][r][(seg[r] == s + 1)][
      1:
    ].sum()  # a segment's first token never counts
    shaped["rewards_BS"][r, s] -= min(max((n - 4) / 4, 0.0), 1.0)
  ref = grads_of(params, shaped, LossConfig())
  np.testing.assert_allclose(float(pen[1]), float(ref[1]), rtol=1e-6)
  np.testing.assert_allclose(float(pen[2]["reward_mean"]), float(ref[2]["reward_mean"]), rtol=1e-6)


def test_bf16_compute_keeps_fp32_master_params_and_remat_is_exact(params):
  batch = batch_of(trajectories(seed=5))  # the plain compile of the test above is reused
  g32, l32, _ = grads_of(params, batch, LossConfig())
  g16, l16, _ = grads_of(params, batch, LossConfig(), model_cfg=DENSE.replace(dtype="bfloat16"))
  assert all(g.dtype == np.float32 for g in jax.tree.leaves(g16))
  np.testing.assert_allclose(float(l16), float(l32), rtol=0.05, atol=0.02)  # bf16 rounding
  gr, lr, _ = grads_of(params, batch, LossConfig(), model_cfg=DENSE.replace(remat="full"))
  np.testing.assert_allclose(float(lr), float(l32), rtol=1e-6)
  assert_trees_close(gr, g32, rtol=1e-5, atol=1e-8)


def test_batch_errors():
  cfg = TrainConfig(micro_batches=3)
  mesh = single_device_mesh()
  batch = batch_of(trajectories())
  with pytest.raises(ValueError, match="micro_batches=3 must be >= 1 and divide the 8 rows"):
    make_train_step(DENSE, cfg, mesh, None, batch)


def test_logit_count_by_hand():
  seg = np.zeros((2, 32), np.int32)
  seg[0, :8] = [1, 1, 1, 1, 2, 2, 2, 0]
  seg[1, :] = 1
  mask = np.zeros((2, 32), np.float32)
  mask[0, :8] = [1, 1, 0, 1, 1, 1, 0, 1]  # scores tokens 1, 3, 5 (0 and 4 start a sequence)
  mask[1, 3:12] = 1  # 9 tokens
  batch = {"segment_ids_BT": seg, "loss_mask_BT": mask}
  # 9 rounded up to a multiple of ceil(32 / buckets), itself a multiple of 8; 32 means all.
  assert [logit_count(batch, n) for n in (8, 4, 2, 1, 0)] == [16, 16, 16, None, None]
  batch["loss_mask_BT"] = mask * (np.arange(32) < 8)  # row 1: tokens 3..7, row 0: 3 tokens
  assert [logit_count(batch, n) for n in (4, 2)] == [8, 16]
  batch["loss_mask_BT"] = 0 * mask
  assert logit_count(batch, 4) == 8  # nothing to score: the smallest length


def test_apply_logits_at_picked_positions_equal_full_logits(params):
  tokens = np.random.default_rng(0).integers(0, 64, (2, 12)).astype(np.int32)
  idx = np.array([[0, 5, 11], [3, 3, 7]], np.int32)
  full = np.asarray(transformer.apply(params, tokens, DENSE))
  got = np.asarray(transformer.apply(params, tokens, DENSE, logit_index_BN=idx))
  np.testing.assert_allclose(got, np.take_along_axis(full, idx[..., None], axis=1), rtol=1e-5)


def test_compute_logprobs_at_loss_tokens_equal_full(params):
  batch = batch_of(trajectories(seed=6))
  p_sh = jax.tree.map(lambda x: x.sharding, params)
  mesh = single_device_mesh()
  full = make_compute_logprobs(DENSE, TrainConfig(), mesh, p_sh, batch)(params, batch)
  loss_only = make_compute_logprobs(DENSE, TrainConfig(), mesh, p_sh, batch, loss_only=True)
  picked = np.asarray(loss_only(params, batch))
  keep = (batch["loss_mask_BT"] > 0) & (batch["positions_BT"] > 0)
  assert keep.sum() > 100 and (np.asarray(full)[~keep] != 0).any()
  np.testing.assert_allclose(picked, np.where(keep, full, 0.0), rtol=1e-5, atol=1e-6)


@functools.lru_cache
def _planned_grads_fn(loss_cfg, micro, layout):
  cfg = TrainConfig(loss=loss_cfg, micro_batches=micro)
  fn = lambda p, r, b: compute_grads(p, r, b, DENSE, cfg, layout)
  return jax.jit(fn, compiler_options=FAST)


def test_logits_at_loss_tokens_grads_equal_full_logits(params):
  """Micro-batches, the reference forward inside the step, decoupled PPO and entropy."""
  batch = batch_of(trajectories(seed=2))
  n = logit_count(batch, 4)
  assert n == 24 < batch["tokens_BT"].shape[1]
  cfg = dataclasses.replace(RICH, compute_entropy=True, entropy_coef=0.01)
  ref = jax.tree.map(lambda x: x * 0.9, params)
  g0, l0, m0 = _planned_grads_fn(cfg, 2, Layout())(params, ref, batch)
  g1, l1, m1 = _planned_grads_fn(cfg, 2, Layout(n))(params, ref, batch)
  assert float(m0["kl"]) > 0 and float(m0["entropy"]) > 0
  np.testing.assert_allclose(float(l1), float(l0), rtol=1e-5)
  assert_trees_close(m1, m0, rtol=1e-5, atol=1e-6)
  assert_trees_close(g1, g0, rtol=1e-4, atol=1e-7)


def test_logits_at_loss_tokens_step_equals_full_logits_sharded():
  """The default step (LM head at the loss tokens only) on 8 devices == every position on one:
  losses, KL and entropy metrics and the updated params."""
  batch = batch_of(trajectories(seed=4))
  loss = LossConfig(kl="k3", kl_coef=0.05, compute_entropy=True, entropy_coef=0.01)
  full = TrainConfig(loss=loss, optim=OPT, logit_buckets=0)
  ref_state, ref_m, ref_losses, ref_step = run_steps(DENSE, full, single_device_mesh(), batch)
  cfg8 = dataclasses.replace(full, logit_buckets=4, mesh=MeshConfig(data=2, fsdp=2, tensor=2))
  state, m, losses, step = run_steps(DENSE, cfg8, make_mesh(cfg8.mesh), batch)
  assert "f32[8,24,64]" in str(step.trace(state, batch).jaxpr)  # the head at 24 of 32
  assert "f32[8,24,64]" not in str(ref_step.trace(ref_state, batch).jaxpr)
  assert step._cache_size() == 1
  assert float(m[-1]["kl"]) > 0 and float(m[-1]["entropy"]) > 0
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
  assert_trees_close(m, ref_m, rtol=1e-4, atol=1e-6)
  assert_trees_close(state.params, ref_state.params, rtol=1e-4, atol=1e-6)


def test_layout_plan_by_hand():
  batch = grpo_batch()  # 16 rows of 32 tokens: 4 prompts of 18 tokens, 4 rows each
  assert plan(batch, TrainConfig(), DENSE, block_rows=16) == Layout(16, 4, 16)
  assert plan(batch, TrainConfig(), DENSE, block_rows=2) == Layout(16, 2, 16)  # 8 devices
  assert plan(batch, TrainConfig(), DENSE, 16, loss_only=False) == Layout(None, 4, 16)
  assert plan(batch, TrainConfig(share_prefixes=False), DENSE, 16) == Layout(16)
  assert plan(batch, TrainConfig(), MOE, 16) == Layout(16)  # MoE statistics count every row
  # Micro-batch m holds rows m, m+2, ...: rows 0 and 2 share a prompt, 0, 2, 4, 6 do not.
  assert shared_prefix(batch, block_rows=8, micro_batches=2) == (2, 16)
  assert shared_prefix(batch_of(trajectories()), block_rows=8) == (1, 0)  # no common prompt
  # Positions restarting after the prompt would let prompt tokens see completion tokens.
  restart = dict(
    batch, positions_BT=np.where(batch["positions_BT"] >= 18, 0, batch["positions_BT"])
  )
  assert shared_prefix(restart, block_rows=16) == (1, 0)
  short = {k: v[:, :10] for k, v in batch.items() if k.endswith("_BT")}
  assert shared_prefix(short, block_rows=16) == (1, 0)  # a prefix under 16 tokens: not worth it


def test_shared_prefix_grads_equal_plain_with_micro_batches(params):
  """Micro-batches (groups of 2 in micro-batch order), the reference forward inside the step,
  decoupled PPO, KL and entropy: the shared-prefix layout == the plain one."""
  batch = grpo_batch()
  cfg = dataclasses.replace(RICH, compute_entropy=True, entropy_coef=0.01)
  ref = jax.tree.map(lambda x: x * 0.9, params)
  g0, l0, m0 = _planned_grads_fn(cfg, 2, Layout())(params, ref, batch)
  g1, l1, m1 = _planned_grads_fn(cfg, 2, Layout(16, 2, 16))(params, ref, batch)
  assert float(m0["kl"]) > 0 and float(m0["entropy"]) > 0
  np.testing.assert_allclose(float(l1), float(l0), rtol=1e-5)
  assert_trees_close(m1, m0, rtol=1e-5, atol=1e-6)
  assert_trees_close(g1, g0, rtol=1e-4, atol=1e-7)


def _multi_turn_groups(groups=4, group=4, prompt=20, seed=11):
  """Store rows of 2-turn episodes: a prompt per group, then action, observation (no loss),
  action, of lengths that vary (packing sorts rows by length: groups end up scattered)."""
  rng = np.random.default_rng(seed)
  out = []
  for g in range(groups):
    head, rows = [int(x) for x in rng.integers(1, 64, prompt)], []
    for s in range(group):
      a, o, b = (int(rng.integers(lo, hi)) for lo, hi in ((2, 9), (3, 7), (2, 7)))
      toks = head + [int(x) for x in rng.integers(1, 64, a + o + b)]
      mask = [0] * prompt + [1] * a + [0] * o + [1] * b
      rows.append(dict(
        trajectory_id=f"g{g}-s{s}", reward=float(rng.integers(0, 2)), tokens=toks,
        loss_mask=mask, logprobs=list(-rng.random(len(toks))), segment_lengths=[len(toks)],
        finish_reason="finish",
      ))  # fmt: skip
    out.append(Group(g, f"t{g}", rows))
  return out


def test_multi_turn_rows_share_their_prompt_in_trimmed_rows(params):
  """build_batch orders a group's multi-turn rows side by side in each micro-batch and trims
  the row length: the planned layout runs each prompt once, on 48 of 128 columns, and equals
  the plain layout on the untrimmed rows."""
  groups, micro = _multi_turn_groups(), 2
  batch, n = build_batch(groups, RICH, 128, 1, micro, 0, micro)
  plain, _ = build_batch(groups, RICH, 128, 1, micro, 0, trim=False)
  assert n == 16 and batch["tokens_BT"].shape == (16, 48) and plain["tokens_BT"].shape[1] == 128
  layout = plan(batch, TrainConfig(micro_batches=micro), DENSE, block_rows=8)
  assert layout.group == 4 and layout.prefix == 16
  ref = jax.tree.map(lambda x: x * 0.9, params)
  g0, l0, m0 = _planned_grads_fn(RICH, micro, Layout())(params, ref, plain)
  g1, l1, m1 = _planned_grads_fn(RICH, micro, layout)(params, ref, batch)
  np.testing.assert_allclose(float(l1), float(l0), rtol=1e-5)
  assert_trees_close(m1, m0, rtol=1e-5, atol=1e-6)
  assert_trees_close(g1, g0, rtol=1e-4, atol=1e-7)


def test_shared_prefix_step_and_reference_equal_plain_sharded(params):
  """The default step and reference forward on 8 devices (each prompt run once per group, the
  LM head at the loss tokens) == the plain ones on one device."""
  batch = grpo_batch()
  loss = LossConfig(kl="k3", kl_coef=0.05, compute_entropy=True)
  plain = TrainConfig(loss=loss, optim=OPT, logit_buckets=0, share_prefixes=False)
  one = single_device_mesh()
  p_sh = jax.tree.map(lambda x: x.sharding, params)
  ref_plain = make_compute_logprobs(DENSE, plain, one, p_sh, batch)(params, batch)
  given = dict(batch, ref_logprobs_BT=np.asarray(ref_plain) * 0.98)  # a reference unlike pi
  want_state, want_m, want_losses, plain_step = run_steps(DENSE, plain, one, given)
  cfg8 = dataclasses.replace(plain, logit_buckets=4, share_prefixes=True)
  cfg8 = dataclasses.replace(cfg8, mesh=MeshConfig(data=2, fsdp=2, tensor=2))
  state, m, losses, step = run_steps(DENSE, cfg8, make_mesh(cfg8.mesh), given)
  assert step.plan(given) == Layout(16, 4, 16)
  assert "f32[4,16,32]" in str(step.trace(state, given).jaxpr)  # 4 prompt rows of 16 tokens
  assert "f32[4,16,32]" not in str(plain_step.trace(want_state, given).jaxpr)
  assert step._cache_size() == 1
  np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
  assert_trees_close(m, want_m, rtol=1e-4, atol=1e-6)
  assert_trees_close(state.params, want_state.params, rtol=1e-4, atol=1e-6)
  # The reference forward shares the prompts too (every log-prob, or the loss tokens only).
  mesh8 = make_mesh(cfg8.mesh)
  p8 = jax.device_put(params, jax.tree.map(lambda x: x.sharding, state.params))
  keep = np.asarray(target_mask(batch["segment_ids_BT"])) > 0
  for loss_only in (False, True):
    got = make_compute_logprobs(
      DENSE, cfg8, mesh8, jax.tree.map(lambda x: x.sharding, p8), batch, loss_only
    )(p8, batch)
    want = np.where(keep & (batch["loss_mask_BT"] > 0 if loss_only else True), ref_plain, 0.0)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def _epochs(clip: float, epochs: int = 6):
  """`epochs` PPO steps on one batch whose behaviour log-probs are the initial policy's (as the
  host loop's loop.updates_per_batch does); returns (per-step metrics, max |logp - behaviour|)."""
  mesh = single_device_mesh()
  cfg = TrainConfig(
    loss=LossConfig(clip_low=clip, clip_high=clip, kl="none"),
    optim=OptimConfig(lr=3e-2, warmup_steps=0, decay_steps=10, max_grad_norm=1e9),
  )
  state, shardings = create_train_state(DENSE, cfg, mesh, jax.random.key(3))
  batch = batch_of(trajectories(seed=5))
  logprobs = make_compute_logprobs(DENSE, cfg, mesh, shardings.params, batch)
  batch = dict(batch, behaviour_logprobs_BT=np.asarray(logprobs(state.params, batch)))
  step = make_train_step(DENSE, cfg, mesh, shardings, batch, compiler_options=FAST)
  mets = []
  for _ in range(epochs):
    state, m = step(state, batch)
    mets.append({k: float(v) for k, v in m.items()})
  mask = batch["loss_mask_BT"] > 0
  drift = np.abs(np.asarray(logprobs(state.params, batch)) - batch["behaviour_logprobs_BT"])
  return mets, float(drift[mask].max())


def test_repeated_updates_on_one_batch_are_clipped_against_the_behaviour_policy():
  clipped, drift_clipped = _epochs(clip=0.05)
  free, drift_free = _epochs(clip=100.0)
  # the first epoch is on-policy: ratio 1, nothing clipped
  assert abs(clipped[0]["ratio"] - 1.0) < 1e-5 and clipped[0]["clip_frac_low"] == 0.0
  assert clipped[0]["clip_frac_high"] == 0.0
  # later epochs see the drift from the fixed behaviour log-probs, and clip it
  assert (
    clipped[-1]["approx_kl"] > 0
    and clipped[-1]["clip_frac_low"] + clipped[-1]["clip_frac_high"] > 0
  )
  assert free[-1]["clip_frac_low"] + free[-1]["clip_frac_high"] == 0.0
  # so the clipped objective moves the policy less over the same epochs
  assert drift_clipped < drift_free
