"""Async correctness: decoupled PPO's importance weights for tokens of three policy versions
against a NumPy loop, and async with eta = 0 training exactly what sync trains, bit for bit."""

import async_harness as h
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.config import tiny
from parallel.mesh import single_device_mesh
from rl import losses
from rl.batch import build_batch
from rl.config import LoopConfig, LossConfig, OptimConfig, TrainConfig
from rl.runtime.records import Group
from rl.train_state import create_train_state
from rl.train_step import make_train_step

CAP = 1.2
FAST = {"xla_backend_optimization_level": 0}  # as tests/test_rl_train_step.py: half the compile


def _three_version_group(rng):
  """Two episodes whose loss tokens were sampled by versions 0, 1 and 2 (weights swapped
  mid-episode); behaviour log-probs differ by version."""
  rows = []
  for s in range(2):
    n = 12
    mask = [0, 0, 0] + [1] * (n - 3)
    versions = [-1, -1, -1] + [min(2, i // 3) for i in range(n - 3)]
    lps = [0.0] * 3 + [float(-1.0 - 0.3 * v + 0.05 * rng.standard_normal()) for v in versions[3:]]
    rows.append(
      dict(
        trajectory_id=f"g0000000-s{s:02d}",
        tokens=[int(x) for x in rng.integers(1, 60, n)],
        loss_mask=mask,
        logprobs=lps,
        versions=versions,
        segment_lengths=[n],
        reward=float(s),
        finish_reason="finish",
        min_version=0,
      )
    )
  return Group(0, "t0", rows)


def _find(batch, tokens):
  """(row, positions) of the packed sequence holding `tokens`."""
  for b in range(batch["tokens_BT"].shape[0]):
    for k in range(1, batch["segment_ids_BT"][b].max() + 1):
      (pos,) = np.nonzero(batch["segment_ids_BT"][b] == k)
      if batch["tokens_BT"][b, pos].tolist() == tokens:
        return np.full(len(pos), b), pos
  raise AssertionError("sequence not in the batch")


@pytest.mark.parametrize(
  "mode,level", [("truncate", "token"), ("mask", "token"), ("truncate", "sequence")]
)
def test_importance_weights_of_three_versions_equal_a_numpy_loop(mode, level):
  rng = np.random.default_rng(0)
  group = _three_version_group(rng)
  cfg = LossConfig(decoupled=True, is_cap=CAP, is_mode=mode, is_level=level)
  batch, _ = build_batch([group], cfg, 16, 2, 1, 0)
  mask_BT, seg_BT = batch["loss_mask_BT"], batch["segment_ids_BT"]
  behave_BT = batch["behaviour_logprobs_BT"]
  prox_BT = np.where(mask_BT > 0, -1.2 + 0.05 * rng.standard_normal(mask_BT.shape), 0.0)
  segs = losses.Segments.make(jnp.asarray(seg_BT), 2)
  w_BT, _ = losses.behaviour_weights(
    jnp.asarray(prox_BT, jnp.float32), jnp.asarray(behave_BT), jnp.asarray(mask_BT), segs, cfg
  )
  w_BT = np.asarray(w_BT)
  # The naive reference: walk each episode's tokens, look up its prox and behaviour log-probs.
  c = cfg.log_ratio_clamp
  seen_versions = set()
  for row in group.rows:
    b, span = _find(batch, row["tokens"])
    ws = []
    for bi, t, m, lp, v in zip(
      b, span, row["loss_mask"], row["logprobs"], row["versions"], strict=True
    ):
      if not m:
        continue
      assert behave_BT[bi, t] == np.float32(lp)  # the per-token behaviour log-prob, as stored
      ws.append(float(prox_BT[bi, t]) - lp)
      seen_versions.add(v)
    lr = np.array(ws)
    if level == "sequence":
      lr = np.full_like(lr, lr.mean())
    want = np.exp(np.clip(lr, -c, c))
    want = np.minimum(want, CAP) if mode == "truncate" else np.where(want > CAP, 0.0, want)
    got = [w_BT[bi, t] for bi, t, m in zip(b, span, row["loss_mask"], strict=True) if m]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
  assert seen_versions == {0, 1, 2}
  if mode == "truncate" and level == "token":
    assert (w_BT == np.float32(CAP)).any() and ((w_BT > 0) & (w_BT < 1)).any()  # both sides


DENSE = tiny("qwen3", vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)
TRAIN = TrainConfig(
  loss=LossConfig(decoupled=True),
  optim=OptimConfig(lr=1e-2, warmup_steps=0, decay_steps=10, eps=1e-3),
)


def _train(tmp_path, loop, steps, step_fn=None):
  """The harness loop with the real batch building and jitted update step."""
  policy, buf, store, m = h.make(tmp_path, loop, seed=3)
  mesh = single_device_mesh()
  state, shardings = create_train_state(DENSE, TRAIN, mesh, jax.random.key(0))
  trained = []
  m.start()
  try:
    for v in range(steps):
      groups = sorted(buf.get_batch(timeout=60), key=lambda g: g.group_id)
      trained.append([r["trajectory_id"] for g in groups for r in g.rows])
      batch, _ = build_batch(groups, TRAIN.loss, 32, 4, 1, 0)
      if step_fn is None:
        step_fn = make_train_step(DENSE, TRAIN, mesh, shardings, batch, compiler_options=FAST)
      state, _ = step_fn(state, batch)
      policy.load_params(None, v + 1)
      buf.set_version(v + 1)
  finally:
    m.stop()
  return trained, jax.device_get(state.params), step_fn


def test_async_with_eta_0_trains_what_sync_trains_bit_for_bit(tmp_path):
  sync = LoopConfig(mode="sync", batch_groups=2, max_staleness=3)
  asyn = LoopConfig(mode="async", batch_groups=2, max_staleness=0)
  assert (asyn.staleness, asyn.token_staleness) == (0, 0)
  ids_s, params_s, fn = _train(tmp_path / "sync", sync, 3)
  ids_a, params_a, _ = _train(tmp_path / "async", asyn, 3, fn)
  assert ids_a == ids_s
  for a, b in zip(jax.tree.leaves(params_a), jax.tree.leaves(params_s), strict=True):
    assert np.array_equal(np.asarray(a), np.asarray(b))
  init = jax.device_get(
    create_train_state(DENSE, TRAIN, single_device_mesh(), jax.random.key(0))[0].params
  )
  assert any(  # the updates did move the params
    not np.array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(jax.tree.leaves(params_s), jax.tree.leaves(init), strict=True)
  )
