"""Rejection-sampling fine-tuning (RFT, expert iteration): supervised steps on verified samples.

Legend: G episodes per group, T tokens per packed row.

`loop.algorithm = "rft"` runs the GRPO loop unchanged up to the batch (same task pool, engine,
sandboxes, verifier, dynamic sampling, telemetry, checkpoints): of each consumed batch it keeps
the episodes the verifier passed, drops repeats of one token sequence, and takes the warm
start's update on them (rl.warm_start: advantage 1, no behaviour log-probs, so the gradient is
the token-mean cross-entropy of the agent's tokens; the loss masks keep the prompt and the
tool outputs out). Failures teach nothing here (no group baseline): that is the difference a
comparison against GRPO measures (docs/training.md).
"""

from __future__ import annotations

import dataclasses

from rl.batch import row_segments, sft_batch
from rl.train_config import LossConfig, TrainConfig

ALGORITHMS = ("grpo", "rft")


def supervised_loss(entropy_coef: float = 0.0) -> LossConfig:
  """The warm start's loss: advantage 1 and ratio 1 make PPO's gradient the cross-entropy's."""
  return LossConfig(
    kl="none",
    policy_loss="ppo",
    aggregation="token-mean",
    compute_entropy=False,
    entropy_coef=entropy_coef,
  )


def update_config(algorithm: str, train: TrainConfig) -> TrainConfig:
  """The TrainConfig of the loop's update: `train` for GRPO; for RFT its optimizer, mesh and
  LoRA with the supervised loss (scored at temperature 1, like the warm start)."""
  if algorithm not in ALGORITHMS:
    raise ValueError(f"loop.algorithm: {algorithm!r} is not one of {ALGORITHMS}")
  if algorithm == "grpo":
    return train
  return dataclasses.replace(train, loss=supervised_loss())


def update_temperature(algorithm: str, temperature: float) -> float:
  """The temperature the update scores at: the rollouts' (agent.temperature) for GRPO, whose
  ratios compare against the engine's log-probs; 1 for RFT, whose update is the warm start's
  cross-entropy."""
  return temperature if algorithm == "grpo" else 1.0


def successes(groups) -> tuple[list[tuple], int]:
  """(group, row) of every verified success, first of each distinct token sequence, in group
  order; and how many passed before deduplication."""
  kept, seen, passed = [], set(), 0
  for g in groups:
    for row in g.rows:
      if not row["passed"] or row.get("infra_error"):
        continue
      passed += 1
      key = tuple(int(t) for t in row["tokens"])
      if key not in seen:
        seen.add(key)
        kept.append((g, row))
  return kept, passed


def build_batch(
  kept: list[tuple], row_len: int, max_segments: int, row_multiple: int, pad_id: int
) -> tuple[dict | None, int]:
  """The kept rows' segments as a supervised batch (None when nothing passed); returns
  (batch, sequences)."""
  seqs = []
  for _, row in kept:
    for seg in row_segments(row):
      if len(seg["tokens"]) > row_len:
        raise ValueError(
          f"{row['trajectory_id']}: {len(seg['tokens'])} tokens > loop.row_len {row_len}"
        )
      seqs.append({"tokens": seg["tokens"], "loss_mask": seg["loss_mask"]})
  if not seqs:
    return None, 0
  return sft_batch(seqs, row_len, max_segments, row_multiple, pad_id), len(seqs)
