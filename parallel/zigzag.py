"""The zig-zag sequence layout that balances causal ring attention (`parallel/ring_attention.py`).

A causal mask makes late tokens attend to more keys than early ones, so
cutting the sequence into n contiguous shards would give the last device n times the work
of the first. Instead the sequence is cut into 2n equal chunks and device i holds chunks
i and 2n-1-i (one early, one late):

    n = 4, chunks 0..7:   device 0: [0, 7]   device 1: [1, 6]   device 2: [2, 5]   device 3: [3, 4]

A model runs in this layout end to end: permute tokens, positions, segment ids and loss
masks once with `to_zigzag` (host side, before sharding), pass the permuted positions to
RoPE, and everything except attention is per-token anyway. `from_zigzag` undoes it.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def _chunk_order(n: int) -> list[int]:
  """The 2n chunks in layout order: device i holds chunks i and 2n-1-i ([0, 2n-1, 1, ...])."""
  return [c for i in range(n) for c in (i, 2 * n - 1 - i)]


def zigzag_indices(seq_len: int, n: int) -> np.ndarray:
  """Natural positions in zig-zag order: `x_layout = x[..., zigzag_indices(T, n)]`."""
  if n < 1 or seq_len % (2 * n):
    raise ValueError(f"zig-zag layout needs seq_len ({seq_len}) divisible by 2 * n ({2 * n})")
  chunks = np.arange(seq_len).reshape(2 * n, seq_len // (2 * n))
  return chunks[_chunk_order(n)].reshape(-1)


def _reorder_chunks(x, order, axis):
  """Concatenates the len(order) equal chunks of `axis` in `order` (static slices, no gather)."""
  axis %= x.ndim
  c = x.shape[axis] // len(order)
  parts = [x[(slice(None),) * axis + (slice(i * c, (i + 1) * c),)] for i in order]
  return (np if isinstance(x, np.ndarray) else jnp).concatenate(parts, axis)


def to_zigzag(x, n: int, axis: int = 1):
  """Reorders the sequence axis of `x` (NumPy or JAX) from natural into zig-zag order."""
  zigzag_indices(x.shape[axis], n)  # validates the length
  return _reorder_chunks(x, _chunk_order(n), axis)


def from_zigzag(x, n: int, axis: int = 1):
  """Inverse of `to_zigzag`."""
  zigzag_indices(x.shape[axis], n)
  return _reorder_chunks(x, list(np.argsort(_chunk_order(n))), axis)
