"""train.loss.negative_advantage_weight: negative advantages are scaled, positive ones untouched."""

import numpy as np
import pytest

from rl.batch import build_batch
from rl.config import LoopConfig, LossConfig
from rl.runtime.records import Group
from rl.train_step import prepare


def _row(s, reward, n_gen):
  return dict(
    trajectory_id=f"g0-s{s}",
    reward=reward,
    tokens=list(range(1, 4 + n_gen + 1)),
    loss_mask=[0] * 4 + [1] * n_gen,
    logprobs=[0.0] * 4 + [-0.5] * n_gen,
    segment_lengths=[4 + n_gen],
    finish_reason="finish",
  )


def test_negative_advantages_are_scaled_by_hand():
  # One success in four: GRPO gives (1 - 1/4) / 0.5 = 1.5 and (0 - 1/4) / 0.5 = -0.5 (ddof 1).
  # Distinct lengths identify the rows after packing.
  g = Group(0, "t", [_row(0, 1.0, 2), _row(1, 0.0, 3), _row(2, 0.0, 4), _row(3, 0.0, 5)])
  for w, want in ((1.0, [1.5, -0.5, -0.5, -0.5]), (0.1, [1.5, -0.05, -0.05, -0.05])):
    cfg = LossConfig(advantage="grpo", negative_advantage_weight=w)
    batch, n = build_batch([g], cfg, 16, 1, 1, 0)
    got = dict(
      zip(batch["loss_mask_BT"].sum(1).tolist(), batch["advantages_BS"][:, 0].tolist(), strict=True)
    )
    np.testing.assert_allclose([got[k] for k in (2, 3, 4, 5)], want, rtol=1e-5)


def test_host_and_device_paths_give_the_same_advantages():
  """Advantages built on the host (rl.batch: advantages_BS) and in the step (a batch carrying
  rewards_BS): one function, so the same loss config trains the same way by either path."""
  rewards = {2: 1.0, 3: 0.0, 4: 0.5, 5: 0.0}  # by generated length (distinct: row identity)
  g = Group(0, "t", [_row(s, r, n) for s, (n, r) in enumerate(rewards.items())])
  for cfg in (
    LossConfig(advantage="grpo", negative_advantage_weight=0.1),
    LossConfig(advantage="rloo", negative_advantage_weight=0.3, overlong="penalty",
               overlong_max_len=4, overlong_buffer=2),
  ):  # fmt: skip
    host, _ = build_batch([g], cfg, 16, 1, 1, 0)
    device = {k: v for k, v in host.items() if k != "advantages_BS"}
    len_B = host["loss_mask_BT"].sum(1).astype(int)
    device["rewards_BS"] = np.array([[rewards[n]] for n in len_B], np.float32)
    device["group_ids_BS"] = np.zeros((len(len_B), 1), np.int32)
    _, adv_BS, _, _ = prepare(device, cfg)
    assert (host["advantages_BS"] < 0).any()  # the weight has something to scale
    np.testing.assert_allclose(np.asarray(adv_BS), host["advantages_BS"], rtol=1e-6, atol=1e-7)
    _, as_given_BS, _, _ = prepare(host, cfg)  # the loop's batch: advantages taken as they are
    np.testing.assert_array_equal(np.asarray(as_given_BS), host["advantages_BS"])


def test_weight_outside_0_1_is_rejected():
  with pytest.raises(ValueError, match="negative_advantage_weight"):
    LossConfig(negative_advantage_weight=1.5)


def test_updates_per_batch_range():
  assert LoopConfig(updates_per_batch=4).updates_per_batch == 4
  with pytest.raises(ValueError, match="updates_per_batch"):
    LoopConfig(updates_per_batch=0)
