"""Sequence packing: several trajectories per row, told apart by segment ids (NumPy, host side).

Legend: B rows, T tokens per row, S sequence slots per row.
A trajectory is a mapping with `tokens` (int, length L <= T), `loss_mask` (L), optional
`behaviour_logprobs` (L, aligned with the tokens: entry t is log p(tokens[t] | tokens[:t])),
and scalars `reward`, `group_id`, optional `truncated` and `advantage`.
The result is a batch in the format documented in rl.train_step. Packing changes nothing
numerically: attention is masked across segments, positions restart at 0 in each segment,
and per-sequence statistics are taken per segment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def plan_rows(lengths: Sequence[int], row_len: int, max_segments: int) -> list[list[int]]:
  """First-fit-decreasing bin packing of sequence indices into rows of `row_len` tokens."""
  order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
  rows: list[list[int]] = []
  free: list[int] = []
  for i in order:
    if lengths[i] > row_len:
      raise ValueError(f"trajectory {i}: {lengths[i]} tokens do not fit in a row of {row_len}")
    for r, room in enumerate(free):
      if lengths[i] <= room and len(rows[r]) < max_segments:
        rows[r].append(i)
        free[r] -= lengths[i]
        break
    else:
      rows.append([i])
      free.append(row_len - lengths[i])
  return [sorted(r) for r in rows]


def _empty_batch(n_rows, row_len, n_slots, with_adv, with_behave):
  b = {
    "tokens_BT": np.zeros((n_rows, row_len), np.int32),
    "positions_BT": np.zeros((n_rows, row_len), np.int32),
    "segment_ids_BT": np.zeros((n_rows, row_len), np.int32),
    "loss_mask_BT": np.zeros((n_rows, row_len), np.float32),
    "truncated_BS": np.zeros((n_rows, n_slots), np.bool_),
  }
  if with_behave:
    b["behaviour_logprobs_BT"] = np.zeros((n_rows, row_len), np.float32)
  if with_adv:
    b["advantages_BS"] = np.zeros((n_rows, n_slots), np.float32)
  else:
    b["rewards_BS"] = np.zeros((n_rows, n_slots), np.float32)
    b["group_ids_BS"] = np.full((n_rows, n_slots), -1, np.int32)
  return b


def pack(
  trajs: Sequence[Mapping],
  row_len: int,
  max_segments: int = 8,
  row_multiple: int = 1,
  pad_id: int = 0,
):
  """Packs trajectories into rows; returns (batch, index_BS) where index_BS[b, s] is the
  trajectory in slot s of row b (-1: empty). `max_segments=1` gives one per row (unpacked).
  Rows are padded with empty rows up to a multiple of `row_multiple` (sharding, micro-batches).
  """
  if not trajs:
    raise ValueError("pack: no trajectories")
  lengths = [len(t["tokens"]) for t in trajs]
  rows = plan_rows(lengths, row_len, max_segments)
  n_rows = -(-len(rows) // row_multiple) * row_multiple
  n_slots = max(len(r) for r in rows)
  with_adv = "advantage" in trajs[0]
  with_behave = "behaviour_logprobs" in trajs[0]
  b = _empty_batch(n_rows, row_len, n_slots, with_adv, with_behave)
  b["tokens_BT"][:] = pad_id
  index_BS = np.full((n_rows, n_slots), -1, np.int64)
  for r, members in enumerate(rows):
    start = 0
    for s, i in enumerate(members):
      t, n = trajs[i], lengths[i]
      if len(t["loss_mask"]) != n:
        raise ValueError(f"trajectory {i}: loss_mask has {len(t['loss_mask'])} entries, not {n}")
      span = slice(start, start + n)
      b["tokens_BT"][r, span] = t["tokens"]
      b["positions_BT"][r, span] = np.arange(n)
      b["segment_ids_BT"][r, span] = s + 1
      b["loss_mask_BT"][r, span] = t["loss_mask"]
      b["truncated_BS"][r, s] = bool(t.get("truncated", False))
      if with_behave:
        b["behaviour_logprobs_BT"][r, span] = t["behaviour_logprobs"]
      if with_adv:
        b["advantages_BS"][r, s] = t["advantage"]
      else:
        b["rewards_BS"][r, s] = t["reward"]
        b["group_ids_BS"][r, s] = t["group_id"]
      index_BS[r, s] = i
      start += n
  return b, index_BS


def unpack_tokens(x_BT: np.ndarray, batch: Mapping, index_BS: np.ndarray, n: int) -> list:
  """Per-token array of a packed batch -> list of per-trajectory arrays (inverse of pack)."""
  out: list = [None] * n
  for r, s in zip(*np.nonzero(index_BS >= 0), strict=True):
    out[index_BS[r, s]] = x_BT[r][batch["segment_ids_BT"][r] == s + 1]
  return out
