"""The host half of GRPO: groups -> advantages -> packed, bucketed train batch.

Legend: G episodes per group, T tokens per packed row.

Every host-side use of `LossConfig` is here: the advantages (rl.advantages.from_rewards, the
same function the step runs on a batch carrying rewards: overlong penalty by the episode's
policy tokens, the estimator over whole groups, the scale of negative advantages), and the
truncation flags `overlong="mask"` reads. Each segment of an episode is
one training sequence; all segments of an episode share its advantage. Rows are packed
(rl.packing) and padded to `multiple * 2^k` rows so the jitted step compiles for few shapes.

A group is anything with `.rows`: store rows (rl.runtime.trajectory_store.SCHEMA) holding
`reward`, `tokens`, `loss_mask`, `logprobs`, `segment_lengths`, `finish_reason`.
"""

from __future__ import annotations

import math

import numpy as np

from rl import advantages as adv_lib
from rl import packing
from rl.train_config import LossConfig


def row_multiple(mesh, micro_batches: int = 1) -> int:
  """Rows a batch must hold a multiple of: the mesh's batch axes times the micro-batches."""
  return int(np.prod([mesh.shape[a] for a in ("data", "fsdp", "expert")])) * micro_batches


def bucket_rows(n: int, multiple: int) -> int:
  """Rows padded to multiple * 2^k so the step compiles for few shapes."""
  k = max(1, -(-n // multiple))
  return multiple * (1 << math.ceil(math.log2(k)))


def pad_rows(batch: dict, multiple: int) -> dict:
  """`batch` with all-zero rows appended up to bucket_rows(rows, multiple)."""
  rows = batch["tokens_BT"].shape[0]
  extra = bucket_rows(rows, multiple) - rows
  if not extra:
    return batch
  return {
    k: np.concatenate([v, np.zeros((extra, *v.shape[1:]), v.dtype)]) for k, v in batch.items()
  }


def row_segments(row: dict) -> list[dict]:
  """Splits a store row back into its segments (each one training sequence)."""
  out, start = [], 0
  for n in row["segment_lengths"]:
    sl = slice(start, start + n)
    out.append(
      {
        "tokens": row["tokens"][sl],
        "loss_mask": row["loss_mask"][sl],
        "behaviour_logprobs": row["logprobs"][sl],
      }
    )
    start += n
  return out


def group_advantages(groups, loss_cfg: LossConfig = LossConfig()) -> list[list[float]]:
  """Advantages per episode (rl.advantages.from_rewards over whole groups; an episode's
  length for the overlong penalty is its policy tokens over all its segments)."""
  sizes = [len(g.rows) for g in groups]
  rewards_N = np.array([float(r["reward"]) for g in groups for r in g.rows], np.float32)
  len_N = np.array([sum(r["loss_mask"]) for g in groups for r in g.rows], np.float32)
  gids_N = np.repeat(np.arange(len(groups)), sizes).astype(np.int32)
  valid_N = np.ones_like(gids_N, bool)
  _, adv_N = adv_lib.from_rewards(loss_cfg, rewards_N, gids_N, valid_N, len_N)
  per_group = np.split(np.asarray(adv_N, np.float64), np.cumsum(sizes))[: len(sizes)]
  return [a.tolist() for a in per_group]


def build_batch(
  groups, loss_cfg: LossConfig, row_len: int, max_segments: int, row_multiple: int, pad_id: int
) -> tuple[dict, int]:
  """Groups -> a packed train batch (rl.train_step format); returns (batch, sequences)."""
  seqs = []
  for g, adv_G in zip(groups, group_advantages(groups, loss_cfg), strict=True):
    for row, adv in zip(g.rows, adv_G, strict=True):
      truncated = row["finish_reason"] in ("token_budget", "context")
      for seg in row_segments(row):
        if len(seg["tokens"]) > row_len:
          raise ValueError(
            f"{row['trajectory_id']}: {len(seg['tokens'])} tokens > loop.row_len {row_len}"
          )
        seqs.append({**seg, "advantage": adv, "truncated": truncated})
  batch, _ = packing.pack(seqs, row_len, max_segments, row_multiple, pad_id)
  return pad_rows(batch, row_multiple), len(seqs)


def sft_batch(seqs: list[dict], row_len: int, max_segments: int, row_multiple: int, pad_id: int):
  """Demonstrations (advantage 1, no behaviour logprobs) -> a packed, bucketed batch."""
  batch, _ = packing.pack(
    [{**s, "advantage": 1.0} for s in seqs], row_len, max_segments, row_multiple, pad_id
  )
  return pad_rows(batch, row_multiple)
