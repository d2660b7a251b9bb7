"""Host-side batch building: advantages per group, segments, packing, row buckets; batch metrics."""

import numpy as np
import pytest

from rl.batch import bucket_rows, build_batch, group_advantages
from rl.config import LossConfig
from rl.runtime.records import Group
from rl.runtime.trainer import rollout_metrics


def _row(gid, s, reward, segments, domain="d", difficulty=1, finish="finish"):
  toks, mask, lps = [], [], []
  for n_prompt, n_gen in segments:
    toks += list(range(1, n_prompt + n_gen + 1))
    mask += [0] * n_prompt + [1] * n_gen
    lps += [0.0] * n_prompt + [-0.1 * (s + 1)] * n_gen
  return dict(
    trajectory_id=f"g{gid}-s{s}",
    reward=reward,
    tokens=toks,
    loss_mask=mask,
    logprobs=lps,
    segment_lengths=[a + b for a, b in segments],
    finish_reason=finish,
    domain=domain,
    difficulty=difficulty,
    generated_tokens=sum(b for _, b in segments),
    num_turns=1,
    tool_errors=0,
    env_s=0.1,
    verify_s=0.2,
    passed=reward >= 1,
  )


def _naive_grpo(rewards, eps=1e-6):
  r = np.asarray(rewards, np.float64)
  return (r - r.mean()) / (r.std(ddof=1) + eps)  # sample std, as the registered grpo


def test_advantages_segments_and_packing():
  g0 = Group(
    0,
    "t0",
    [_row(0, 0, 1.0, [(5, 3)]), _row(0, 1, 0.0, [(5, 4)]), _row(0, 2, 0.0, [(5, 2), (6, 3)])],
  )  # the last episode has 2 segments
  g1 = Group(
    1, "t1", [_row(1, 0, 0.5, [(4, 4)]), _row(1, 1, 1.0, [(4, 2)]), _row(1, 2, 0.0, [(4, 1)])]
  )
  batch, n = build_batch(
    [g0, g1], LossConfig(advantage="grpo"), row_len=16, max_segments=1, row_multiple=2, pad_id=0
  )
  assert n == 7
  assert batch["tokens_BT"].shape == (8, 16)  # 7 rows -> the next power-of-2 multiple of 2
  expected = np.concatenate(
    [_naive_grpo([1, 0, 0]), [_naive_grpo([1, 0, 0])[2]], _naive_grpo([0.5, 1.0, 0.0])]
  )
  # Rows come in first-fit-decreasing order: match (generated length, advantage) pairs.
  got = sorted(
    zip(batch["loss_mask_BT"].sum(1).tolist(), batch["advantages_BS"][:, 0].tolist(), strict=True)
  )
  lens = [3, 4, 2, 3, 4, 2, 1]
  want = sorted(zip([float(x) for x in lens], expected.tolist(), strict=True))
  got = [g for g in got if g[0] > 0]
  np.testing.assert_allclose(np.array(sorted(got)), np.array(sorted(want)), rtol=1e-5)
  # Behaviour logprobs sit exactly on the generated tokens.
  np.testing.assert_array_equal(batch["behaviour_logprobs_BT"] != 0, batch["loss_mask_BT"] > 0)
  assert batch["segment_ids_BT"][7].sum() == 0  # the padding row is empty


def test_overlong_penalty_shapes_rewards_before_advantages_by_hand():
  # Policy tokens 2, 3, 4 against L_max 4 with a buffer of 2: penalties 0, -0.5, -1 (x 0.8),
  # added to the rewards 1, 1, 0 before GRPO: shaped rewards 1, 0.6, -0.8.
  g = Group(0, "t", [_row(0, s, r, [(3, n)]) for s, (r, n) in enumerate([(1, 2), (1, 3), (0, 4)])])
  cfg = LossConfig(overlong="penalty", overlong_max_len=4, overlong_buffer=2, overlong_penalty=0.8)
  np.testing.assert_allclose(group_advantages([g], cfg)[0], _naive_grpo([1, 0.6, -0.8]), rtol=1e-5)
  batch, n = build_batch([g], cfg, 16, 1, 1, 0)
  got = dict(
    zip(batch["loss_mask_BT"].sum(1).tolist(), batch["advantages_BS"][:, 0].tolist(), strict=True)
  )
  np.testing.assert_allclose([got[k] for k in (2, 3, 4)], _naive_grpo([1, 0.6, -0.8]), rtol=1e-5)
  plain = group_advantages([g], LossConfig())[0]  # no penalty: the rewards as they are
  np.testing.assert_allclose(plain, _naive_grpo([1, 1, 0]), rtol=1e-5)


def test_overlong_penalty_needs_a_buffer_at_parse_time():
  with pytest.raises(ValueError, match="overlong='penalty' needs 0 < overlong_buffer"):
    LossConfig(overlong="penalty", overlong_max_len=4, overlong_buffer=0)


def test_too_long_sequence_names_the_trajectory():
  g = Group(3, "t", [_row(3, 0, 1.0, [(10, 10)]), _row(3, 1, 0.0, [(3, 2)])])
  with pytest.raises(ValueError, match="g3-s0: 20 tokens > loop.row_len 16"):
    build_batch([g], LossConfig(), 16, 1, 1, 0)


def testbucket_rows():
  assert [bucket_rows(n, 1) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]
  assert [bucket_rows(n, 4) for n in (1, 4, 5, 12)] == [4, 4, 8, 16]


def test_rollout_metrics_by_hand():
  g = Group(
    0,
    "t",
    [
      _row(0, 0, 1.0, [(3, 2)], domain="a", difficulty=1),
      _row(0, 1, 0.0, [(3, 2)], domain="a", difficulty=2),
      _row(0, 2, 1.0, [(3, 4)], domain="b", difficulty=2, finish="max_turns"),
    ],
  )
  m = rollout_metrics([g])
  assert m["pass_rate/overall"] == pytest.approx(2 / 3)
  assert m["pass_rate/domain/a"] == 0.5 and m["pass_rate/domain/b"] == 1.0
  assert m["pass_rate/difficulty/1"] == 1.0 and m["pass_rate/difficulty/2"] == 0.5
  assert m["episode/finished_frac"] == pytest.approx(2 / 3)
  assert m["episode/generated_tokens"] == pytest.approx(8 / 3)
