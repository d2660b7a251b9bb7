"""Host-side packing: layout, round trip, limits. (packed == unpacked loss: test_rl_train_step.)"""

import numpy as np
import pytest

from rl.packing import pack, plan_rows, unpack_tokens


def trajs(lengths, seed=0):
  rng = np.random.default_rng(seed)
  return [
    dict(
      tokens=rng.integers(1, 50, n),
      loss_mask=(np.arange(n) >= n // 2).astype(np.float32),
      behaviour_logprobs=-rng.random(n).astype(np.float32),
      reward=float(i),
      group_id=i // 2,
      truncated=i == 1,
    )
    for i, n in enumerate(lengths)
  ]


def test_plan_rows_by_hand():
  # first-fit decreasing into rows of 10: 7, 6, 5 open three rows; 4 fits the 6 (room 4),
  # 3 fits the 7 (room 3), 2 only fits the 5.
  rows = plan_rows([7, 6, 5, 4, 3, 2], 10, max_segments=8)
  assert rows == [[0, 4], [1, 3], [2, 5]]
  assert plan_rows([1, 1, 1], 10, max_segments=2) == [[0, 1], [2]]


def test_pack_layout_and_round_trip():
  ts = trajs([7, 6, 5, 4, 3, 2])
  batch, index_BS = pack(ts, 10, row_multiple=4)
  assert batch["tokens_BT"].shape == (4, 10) and index_BS.shape == (4, 2)
  assert (index_BS[3] == -1).all() and (batch["segment_ids_BT"][3] == 0).all()  # padding row
  for key, field in [
    ("tokens_BT", "tokens"),
    ("loss_mask_BT", "loss_mask"),
    ("behaviour_logprobs_BT", "behaviour_logprobs"),
  ]:
    back = unpack_tokens(batch[key], batch, index_BS, len(ts))
    for t, b in zip(ts, back, strict=True):
      np.testing.assert_array_equal(b, t[field])
  # positions restart per segment; per-sequence fields land in the right slot
  r, s = np.argwhere(index_BS == 5)[0]
  seg = batch["segment_ids_BT"][r] == s + 1
  np.testing.assert_array_equal(batch["positions_BT"][r][seg], np.arange(2))
  assert batch["rewards_BS"][r, s] == 5.0 and batch["group_ids_BS"][r, s] == 2
  r, s = np.argwhere(index_BS == 1)[0]
  assert batch["truncated_BS"][r, s] and batch["truncated_BS"].sum() == 1
  assert (batch["group_ids_BS"][index_BS < 0] == -1).all()


def test_advantages_instead_of_rewards_and_errors():
  ts = [dict(tokens=[1, 2, 3], loss_mask=[0, 1, 1], advantage=0.5)]
  batch, _ = pack(ts, 4, max_segments=1)
  assert "rewards_BS" not in batch and batch["advantages_BS"][0, 0] == 0.5
  with pytest.raises(ValueError, match="trajectory 0: 5 tokens do not fit in a row of 4"):
    pack([dict(tokens=[1] * 5, loss_mask=[1] * 5, advantage=0.0)], 4)
  with pytest.raises(ValueError, match="trajectory 0: loss_mask has 2 entries, not 3"):
    pack([dict(tokens=[1, 2, 3], loss_mask=[0, 1], advantage=0.0)], 4)
