"""train.loss.negative_advantage_weight: negative advantages are scaled, positive ones untouched."""

import numpy as np
import pytest

from rl.batch import build_batch
from rl.config import LoopConfig, LossConfig
from rl.runtime.records import Group


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


def test_weight_outside_0_1_is_rejected():
  with pytest.raises(ValueError, match="negative_advantage_weight"):
    LossConfig(negative_advantage_weight=1.5)


def test_updates_per_batch_range():
  assert LoopConfig(updates_per_batch=4).updates_per_batch == 4
  with pytest.raises(ValueError, match="updates_per_batch"):
    LoopConfig(updates_per_batch=0)
