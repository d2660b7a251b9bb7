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


def group_order(index_BS: np.ndarray, micro_batches: int) -> np.ndarray:
  """Row permutation putting rows in sequence order (a group's samples side by side) in
  micro-batch order (micro-batch m holds rows m, m+M, ...), where rl.layout looks for groups
  of rows sharing a prompt. Empty rows (index -1) go last."""
  B = len(index_BS)
  first = np.where(index_BS[:, 0] >= 0, index_BS[:, 0], np.iinfo(np.int64).max)
  seq = np.argsort(first, kind="stable")  # j-th row in micro-batch order
  j = np.arange(B)
  out = np.empty(B, np.int64)
  out[(j % (B // micro_batches)) * micro_batches + j // (B // micro_batches)] = seq
  return out


def trim_columns(batch: dict, loss_cfg: LossConfig) -> dict:
  """`batch` cut to the used columns, rounded up to a multiple of ceil(T / 8) (a multiple of
  8): the update's work follows the episodes' lengths, not row_len, in at most 8 static
  shapes. Kept whole when the loss is normalised by the row length (seq-mean-token-sum-norm
  with norm_length 0)."""
  if loss_cfg.aggregation == "seq-mean-token-sum-norm" and not loss_cfg.norm_length:
    return batch
  T = batch["tokens_BT"].shape[1]
  used = int(np.nonzero((batch["segment_ids_BT"] > 0).any(0))[0].max(initial=0)) + 1
  unit = 8 * math.ceil(T / 8 / 8)
  n = min(T, unit * math.ceil(used / unit))
  return {k: v[:, :n] if k.endswith("_BT") else v for k, v in batch.items()}


def build_batch(
  groups,
  loss_cfg: LossConfig,
  row_len: int,
  max_segments: int,
  row_multiple: int,
  pad_id: int,
  micro_batches: int = 1,
  *,
  trim: bool = True,
) -> tuple[dict, int]:
  """Groups -> a packed train batch (rl.train_step format); returns (batch, sequences).

  Rows are ordered so a group's samples sit side by side in each micro-batch (their shared
  prompt runs once, rl.layout) and trimmed to the used columns (`trim_columns`)."""  # fmt: skip
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
  batch, index_BS = packing.pack(seqs, row_len, max_segments, row_multiple, pad_id)
  batch = pad_rows(batch, row_multiple)
  rows = len(batch["tokens_BT"])
  index_BS = np.concatenate([index_BS, np.full((rows - len(index_BS), index_BS.shape[1]), -1)])
  perm = group_order(index_BS, micro_batches)
  batch = {k: v[perm] for k, v in batch.items()}
  return (trim_columns(batch, loss_cfg) if trim else batch), len(seqs)


def sft_batch(seqs: list[dict], row_len: int, max_segments: int, row_multiple: int, pad_id: int):
  """Demonstrations (advantage 1, no behaviour logprobs) -> a packed, bucketed batch."""
  batch, _ = packing.pack(
    [{**s, "advantage": 1.0} for s in seqs], row_len, max_segments, row_multiple, pad_id
  )
  return pad_rows(batch, row_multiple)
