"""Static layout of a host batch for the jitted update and forward (NumPy, host side).

Legend: B rows, T tokens per row, M micro-batches, S segment ids.

A `Layout` is a static argument of the jitted step: how many positions per row the LM head
runs at (`logit_count`) and whether groups of rows share a prompt prefix that runs once
(`shared_prefix`). Both are read off the batch's contents and rounded, so that a run meets
only a few layouts (one compile each); every layout gives the losses, gradients and metrics
of the plain one (every position, every row on its own).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import numpy as np

from models.config import ModelConfig
from rl.train_config import TrainConfig

MIN_PREFIX = 16  # shorter shared prefixes are not worth a compile


class Layout(NamedTuple):
  """Static layout: n_logits LM-head positions per row (None: all); groups of `group`
  consecutive rows (in micro-batch order) share their first `prefix` tokens (1, 0: none)."""

  n_logits: int | None = None
  group: int = 1
  prefix: int = 0


def logit_count(batch, buckets: int) -> int | None:
  """Static LM-head length for a host batch: None (every position) or n_logits < T.

  n_logits is the most loss tokens (with a predecessor in their sequence) in one row, rounded
  up to a multiple of ceil(T / buckets) (a multiple of 8).
  """
  if buckets < 1:
    return None
  mask, seg = np.asarray(batch["loss_mask_BT"]) > 0, np.asarray(batch["segment_ids_BT"])
  T = mask.shape[1]
  need = (mask[:, 1:] & (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)).sum(1).max(initial=0)
  unit = 8 * math.ceil(T / buckets / 8)
  n = unit * max(math.ceil(need / unit), 1)
  return None if n >= T else n


def shared_prefix(batch, block_rows: int, micro_batches: int = 1) -> tuple[int, int]:
  """(group, prefix) saving the most token work, or (1, 0).

  Rows are taken in micro-batch order (micro-batch m holds rows m, m+M, ...); a group is
  `group` consecutive rows with the same first `prefix` tokens, positions and segment ids and
  never spans two blocks of `block_rows` (one device's rows of one micro-batch). prefix is a
  power of two in [MIN_PREFIX, T), and no prefix token may attend to a suffix token.
  """
  order = np.concatenate(
    [np.arange(m, len(batch["tokens_BT"]), micro_batches) for m in range(micro_batches)]
  )
  keys = ("tokens_BT", "positions_BT", "segment_ids_BT")
  tok, pos, seg = (np.asarray(batch[k])[order] for k in keys)
  B, T = tok.shape
  same_BT = (tok[1:] == tok[:-1]) & (pos[1:] == pos[:-1]) & (seg[1:] == seg[:-1])
  lcp_B = np.append(np.where(same_BT.all(1), T, same_BT.argmin(1)), T)  # with the next row
  best, saved = (1, 0), 0
  for g in range(2, block_rows + 1):
    if block_rows % g:
      continue
    common = int(lcp_B.reshape(-1, g)[:, :-1].min())
    p = 2 ** int(math.log2(min(common, T - 1))) if common >= MIN_PREFIX else 0
    if p >= MIN_PREFIX and B * (g - 1) // g * p > saved and _prefix_first(pos, seg, p):
      best, saved = (g, p), B * (g - 1) // g * p
  return best


def _prefix_first(pos_BT, seg_BT, p: int) -> bool:
  """No token of the first p columns sees a later column: per sequence, the suffix positions
  all exceed the prefix positions (attention compares positions, not columns)."""
  B, S = len(seg_BT), int(seg_BT.max()) + 1
  rows = np.arange(B)[:, None]
  hi_BS = np.full((B, S), -1)
  np.maximum.at(hi_BS, (rows, seg_BT[:, :p]), pos_BT[:, :p])
  lo_BS = np.full((B, S), np.iinfo(np.int64).max)
  np.minimum.at(lo_BS, (rows, seg_BT[:, p:]), pos_BT[:, p:])
  return bool((lo_BS[:, 1:] > hi_BS[:, 1:]).all())


def plan(batch, cfg: TrainConfig, model_cfg: ModelConfig, block_rows: int, loss_only=True):
  """The Layout of a host batch (`block_rows`: rows per device in one micro-batch).

  loss_only: the LM head may skip positions outside the loss mask.
  """
  if any(isinstance(x, jax.Array) and not x.is_fully_addressable for x in batch.values()):
    return Layout()  # a multi-host global batch: no host copy to read
  n = logit_count(batch, cfg.logit_buckets) if loss_only else None
  if not cfg.share_prefixes or model_cfg.is_moe or model_cfg.attention == "ring":
    return Layout(n)
  return Layout(n, *shared_prefix(batch, block_rows, cfg.micro_batches))
