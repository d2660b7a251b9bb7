"""KV eviction for very long episodes: attention sinks + a recent window (StreamingLLM-style).

A slot's page table becomes `sink` fixed pages (the first tokens) followed by a ring of `ring`
pages: page number n >= sink lives in entry sink + (n - sink) % ring, so the table never grows
and each decode step attends to at most (sink + ring) pages, whatever the episode length.
Tokens keep their original RoPE positions (no re-rotation), and a page is dropped as soon as
the ring reuses its entry, so the recent window holds between (ring - 1) * p + 1 and ring * p
tokens. The lowest-attention (H2O) policy is not implemented.

Legend: S slots, M = sink + ring table entries, p page size, N positions.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

FAR = 2**30  # a key position every query position precedes: masked by causality


@dataclasses.dataclass(frozen=True)
class Window:
  """sink pages kept forever + ring pages of recent context (hashable: a static jit arg)."""

  sink: int = 1
  ring: int = 4

  def __post_init__(self):
    if self.sink < 0 or self.ring < 2:
      raise ValueError(f"Window needs sink >= 0 and ring >= 2 (got {self.sink}, {self.ring})")

  @property
  def pages(self) -> int:
    return self.sink + self.ring


def table_index(page_no, window: Window | None):
  """Page-table entry holding page number page_no (identity without a window)."""
  if window is None:
    return page_no
  ring_idx = window.sink + (page_no - window.sink) % window.ring
  return jnp.where(page_no < window.sink, page_no, ring_idx)


def key_positions(cur_pos_S, M: int, p: int, window: Window | None):
  """Position of every cached key [S, M*p] as seen from a query at cur_pos_S.

  Entries that hold no page yet get FAR (masked by causality like any future key).
  """
  S = cur_pos_S.shape[0]
  entry_M = jnp.arange(M)
  if window is None:
    page_SM = jnp.broadcast_to(entry_M, (S, M))
  else:
    cur_page_S1 = (cur_pos_S // p)[:, None]
    ring_j = entry_M[None] - window.sink
    newest = cur_page_S1 - jnp.mod(cur_page_S1 - window.sink - ring_j, window.ring)
    page_SM = jnp.where(entry_M[None] < window.sink, entry_M[None], newest)
    page_SM = jnp.where((entry_M[None] >= window.sink) & (page_SM < window.sink), FAR // p, page_SM)
  pos_SMp = page_SM[:, :, None] * p + jnp.arange(p)[None, None]
  return pos_SMp.reshape(S, M * p).astype(jnp.int32)


def survives(pos_BT, length_B, p: int, window: Window | None):
  """Which of a prompt's positions are still in the window once all length_B tokens are in."""
  if window is None:
    return jnp.ones(pos_BT.shape, bool)
  page_BT = pos_BT // p
  last_B1 = ((length_B - 1) // p)[:, None]
  return (page_BT < window.sink) | (page_BT > last_B1 - window.ring)
