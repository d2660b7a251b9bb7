"""RFT (loop.algorithm=rft): the batch holds only the verified successes, each distinct token
sequence once, with the agent's loss masks; a toy run in real sandboxes trains exactly those
(the store's batch records against a naive recomputation from the store's episodes)."""

import dataclasses

import numpy as np
import pytest

from configs import toy
from rl import config as rl_config
from rl import rft
from rl.runtime import run as rl_run
from rl.runtime.records import Group
from rl.runtime.telemetry import read_metrics, series
from rl.runtime.trajectory_store import TrajectoryStore


def _row(tid, tokens, mask, passed, infra=None):
  return {
    "trajectory_id": tid,
    "tokens": tokens,
    "loss_mask": mask,
    "logprobs": [-0.5] * len(tokens),
    "segment_lengths": [len(tokens)],
    "passed": passed,
    "infra_error": infra,
    "reward": float(passed),
    "finish_reason": "finish",
  }


def test_successes_keeps_each_distinct_verified_sequence_once():
  a, b = [5, 6, 7, 8], [5, 6, 9, 8]
  groups = [
    Group(0, "t0", [_row("g0-s0", a, [0, 0, 1, 1], True), _row("g0-s1", b, [0, 0, 1, 1], False)]),
    Group(
      1,
      "t1",
      [
        _row("g1-s0", a, [0, 0, 1, 1], True),  # the same tokens as g0-s0: dropped
        _row("g1-s1", b, [0, 1, 1, 1], True),  # b failed in g0, passes here: kept
        _row("g1-s2", [1, 2], [0, 1], True, infra="sandbox died"),  # never trained
      ],
    ),
  ]
  kept, passed = rft.successes(groups)
  assert [r["trajectory_id"] for _, r in kept] == ["g0-s0", "g1-s1"] and passed == 3
  batch, n_seqs = rft.build_batch(kept, row_len=8, max_segments=1, row_multiple=1, pad_id=0)
  assert n_seqs == 2 and "behaviour_logprobs_BT" not in batch  # ratio 1: the warm start's update
  # Rows are padded to a power of 2; each holds one kept sequence with its own loss mask.
  np.testing.assert_array_equal(batch["tokens_BT"][:, :4], [a, b])
  np.testing.assert_array_equal(batch["loss_mask_BT"][:, :4], [[0, 0, 1, 1], [0, 1, 1, 1]])
  np.testing.assert_array_equal(batch["advantages_BS"][:, 0], [1.0, 1.0])
  assert rft.build_batch([], 8, 1, 1, 0) == (None, 0)  # nothing passed: no update


def test_update_config_swaps_only_the_loss():
  train = rl_config.TrainConfig(loss=rl_config.LossConfig(kl="k3", kl_coef=0.1))
  assert rft.update_config("grpo", train) is train
  assert rft.update_temperature("grpo", 0.7) == 0.7 and rft.update_temperature("rft", 0.7) == 1.0
  sup = rft.update_config("rft", train)
  assert sup.loss == rft.supervised_loss() and sup.optim == train.optim and sup.lora == train.lora
  with pytest.raises(ValueError, match="loop.algorithm"):
    rft.update_config("ppo", train)
  with pytest.raises(ValueError, match="replay"):
    rl_config.LoopConfig(algorithm="rft", replay_groups=2)


def _expected(store: TrajectoryStore, steps: int, groups_per_step: int) -> dict[int, list[str]]:
  """Naive: sync, no dynamic sampling, so step s trains groups (s-1)*B .. s*B-1; of their
  episodes, the passed ones, the first of each token sequence, in group and sample order."""
  rows = sorted(store.read().to_pylist(), key=lambda r: (r["group_id"], r["sample"]))
  out = {}
  for s in range(1, steps + 1):
    seen, ids = [], []
    for r in rows:
      if (s - 1) * groups_per_step <= r["group_id"] < s * groups_per_step and r["passed"]:
        if list(r["tokens"]) not in seen:
          seen.append(list(r["tokens"]))
          ids.append(r["trajectory_id"])
    out[s] = ids
  return out


def test_rft_toy_run_trains_only_distinct_successes(tmp_path):
  c = toy.get_config()
  c.loop.algorithm, c.loop.steps, c.loop.checkpoint_every = "rft", 4, 2
  exp = rl_config.to_experiment(c)
  assert not exp.rollout.dynamic_sampling and exp.loop.mode == "sync"  # _expected relies on it
  summary = rl_run.run(exp, str(tmp_path))
  assert summary["step"] == 4
  store = TrajectoryStore(tmp_path)
  assert not any(store.read(["infra_error"]).column("infra_error").to_pylist())
  batches = store.read_batches().to_pylist()
  trained = {s: [b["trajectory_id"] for b in batches if b["step"] == s] for s in range(1, 5)}
  assert trained == _expected(store, 4, exp.loop.batch_groups)
  rows = {r["trajectory_id"]: r for r in store.read().to_pylist()}
  assert all(rows[t]["passed"] for ids in trained.values() for t in ids)
  assert sum(map(len, trained.values())) > 0  # the run did train (the warm start passes some)
  metrics = read_metrics(tmp_path)
  _, kept = series(metrics, "rft/kept")
  _, passed = series(metrics, "rft/passed")
  assert list(kept) == [len(trained[s]) for s in range(1, 5)] and all(passed >= kept)
  # The experiment record says which algorithm ran; a resume of it is already complete.
  assert '"algorithm": "rft"' in (tmp_path / "experiment.json").read_text()
  again = rl_run.run(dataclasses.replace(exp), str(tmp_path))
  assert again.get("already_complete")
