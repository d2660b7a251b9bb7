"""Ring attention over the `sequence` mesh axis, causal work balanced by a zig-zag layout.

Each device keeps its queries and passes its keys/values around a ring with `ppermute`;
every step folds one K/V block into an online softmax (flash-attention style), so no
device ever holds the full T x T score matrix. Inside a block queries and keys are taken
in chunks, so the live scores are chunk x chunk, and chunk pairs that causality masks
entirely are skipped (`lax.cond`). The backward pass is a second ring
(custom VJP): K/V travel again together with their dK/dV accumulators, which arrive back
at their owner after n hops; the forward saves only q, k, v, out and the log-sum-exp.

Zig-zag layout (`parallel/zigzag.py`): device i holds sequence chunks i and 2n-1-i of 2n. At
ring step s device i holds the K/V of device j = (i - s) mod n. Step 0 (j == i) is the
local causal block. For j < i every key of j's early chunk precedes every local query and
j's late chunk follows them all: only q x (early half of kv) is computed. For j > i only
the local late chunk sees any of j's keys, and it sees all of them: only (late half of q)
x kv. Both are half a block, so every device does the same work at every step (Llama 3's
context-parallel layout; ring-flash-attention calls it "zigzag").

A model runs in this layout end to end (`zigzag.to_zigzag` / `from_zigzag`).

Masking is by positions and segment ids, exactly as `models/attention.py` (`attend`): key
s is visible to query t iff seg[s] != 0 and seg[t] == seg[s] and (not causal or
pos[s] <= pos[t]); segment 0 marks padding and a query with no visible key returns zeros.
The skipped half blocks are assumed masked, which holds when positions increase along the
natural order within each segment (true for plain and packed sequences).

Legend: B batch, T tokens (global), L local tokens (T / n), C key chunk, H query heads,
K kv heads, G = H / K query heads per kv head, d head dim.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from parallel import rules as rules_lib
from parallel.zigzag import zigzag_indices

# Finite "minus infinity": exp() of it is exactly 0 in fp32 and it never makes inf - inf.
_NEG = -0.7 * float(np.finfo(np.float32).max)


# --------------------------------------------------------------------------- one block


def _mask_BQC(q_pos_BQ, k_pos_BC, q_seg_BQ, k_seg_BC, causal):
  mask = (k_seg_BC[:, None, :] != 0) & (q_seg_BQ[:, :, None] == k_seg_BC[:, None, :])
  if causal:
    mask &= q_pos_BQ[:, :, None] >= k_pos_BC[:, None, :]
  return mask[:, None, None]  # broadcast over K, G


def _scores(q_BQKGd, k_BCKd, scale):
  return (
    jnp.einsum("bqkgd,bckd->bkgqc", q_BQKGd, k_BCKd, preferred_element_type=jnp.float32) * scale
  )


def _split(x, axis, c):
  """[..., N * c, ...] -> [N, ..., c, ...]: chunks of `axis` as the leading (scan) axis."""
  axis %= x.ndim
  x = x.reshape(*x.shape[:axis], x.shape[axis] // c, c, *x.shape[axis + 1 :])
  return jnp.moveaxis(x, axis, 0)


def _merge(x, axis):
  """Inverse of `_split`."""
  axis %= x.ndim - 1
  x = jnp.moveaxis(x, 0, axis)
  return x.reshape(*x.shape[:axis], -1, *x.shape[axis + 2 :])


def _needed(q_pos_BQ, k_pos_BC, causal):
  """False when causality masks every (query, key) pair of the chunk pair: skip it."""
  return jnp.min(k_pos_BC) <= jnp.max(q_pos_BQ) if causal else jnp.bool_(True)


def _block_fwd(acc, q_BQKGd, q_pos_BQ, q_seg_BQ, kv, *, causal, chunk, scale):
  """Folds one K/V block into the running (o, m, l), chunk x chunk at a time."""

  def kv_step(acc, kv_c, q_c):
    (o_BQKGd, m_BKGQ, l_BKGQ), (q_BQKGd, q_pos, q_seg) = acc, q_c
    k_BCKd, v_BCKd, k_pos_BC, k_seg_BC = kv_c
    mask = _mask_BQC(q_pos, k_pos_BC, q_seg, k_seg_BC, causal)
    s_BKGQC = jnp.where(mask, _scores(q_BQKGd, k_BCKd, scale), _NEG)
    m_new = jnp.maximum(m_BKGQ, s_BKGQC.max(-1))
    # where() keeps fully masked rows at exactly 0 instead of exp(_NEG - _NEG) = 1.
    p_BKGQC = jnp.where(mask, jnp.exp(s_BKGQC - m_new[..., None]), 0.0)
    corr_BKGQ = jnp.exp(m_BKGQ - m_new)
    l_new = l_BKGQ * corr_BKGQ + p_BKGQC.sum(-1)
    pv = jnp.einsum(
      "bkgqc,bckd->bqkgd", p_BKGQC.astype(v_BCKd.dtype), v_BCKd, preferred_element_type=jnp.float32
    )
    return o_BQKGd * jnp.moveaxis(corr_BKGQ, 3, 1)[..., None] + pv, m_new, l_new

  def q_step(_, xs):
    o, m, den, *q_c = xs

    def step(acc, kv_c):
      run = functools.partial(kv_step, kv_c=kv_c, q_c=q_c)
      return jax.lax.cond(_needed(q_c[1], kv_c[2], causal), run, lambda a: a, acc), None

    acc, _ = jax.lax.scan(step, (o, m, den), [_split(a, 1, chunk) for a in kv])
    return None, acc

  o, m, den = acc
  xs = [_split(o, 1, chunk), _split(m, -1, chunk), _split(den, -1, chunk)]
  xs += [_split(a, 1, chunk) for a in (q_BQKGd, q_pos_BQ, q_seg_BQ)]
  _, (o, m, den) = jax.lax.scan(q_step, None, xs)
  return _merge(o, 1), _merge(m, -1), _merge(den, -1)


def _block_bwd(
  q_BQKGd, q_pos_BQ, q_seg_BQ, do_BQKGd, lse_BKGQ, delta_BKGQ, kv, *, causal, chunk, scale
):
  """Gradients of one (queries, K/V block) pair, chunk x chunk: dq, dk, dv in fp32."""
  f32 = dict(preferred_element_type=jnp.float32)

  def pair(dq_BQKGd, dk_BCKd, dv_BCKd, q_c, kv_c):
    q_BQKGd, q_pos, q_seg, do_BQKGd, lse_BKGQ, delta_BKGQ = q_c
    k_BCKd, v_BCKd, k_pos_BC, k_seg_BC = kv_c
    mask = _mask_BQC(q_pos, k_pos_BC, q_seg, k_seg_BC, causal)
    s_BKGQC = _scores(q_BQKGd, k_BCKd, scale)
    p_BKGQC = jnp.where(mask, jnp.exp(s_BKGQC - lse_BKGQ[..., None]), 0.0)
    dv_BCKd = dv_BCKd + jnp.einsum("bkgqc,bqkgd->bckd", p_BKGQC, do_BQKGd, **f32)
    dp_BKGQC = jnp.einsum("bqkgd,bckd->bkgqc", do_BQKGd, v_BCKd, **f32)
    ds_BKGQC = p_BKGQC * (dp_BKGQC - delta_BKGQ[..., None]) * scale
    dq_BQKGd = dq_BQKGd + jnp.einsum("bkgqc,bckd->bqkgd", ds_BKGQC, k_BCKd, **f32)
    dk_BCKd = dk_BCKd + jnp.einsum("bkgqc,bqkgd->bckd", ds_BKGQC, q_BQKGd, **f32)
    return dq_BQKGd, dk_BCKd, dv_BCKd

  kv_chunks = [_split(a, 1, chunk) for a in kv]

  def q_step(dkv, q_c):
    def kv_step(dq, xs):
      kv_c, dk, dv = xs[:4], xs[4], xs[5]
      run = lambda c: pair(*c, q_c, kv_c)
      dq, dk, dv = jax.lax.cond(_needed(q_c[1], kv_c[2], causal), run, lambda c: c, (dq, dk, dv))
      return dq, (dk, dv)

    dq0 = jnp.zeros_like(q_c[0], jnp.float32)  # *_like keeps the shard_map vma type
    dq, dkv = jax.lax.scan(kv_step, dq0, (*kv_chunks, *dkv))
    return dkv, dq

  q_chunks = [_split(a, 1, chunk) for a in (q_BQKGd, q_pos_BQ, q_seg_BQ, do_BQKGd)]
  q_chunks += [_split(a, -1, chunk) for a in (lse_BKGQ, delta_BKGQ)]
  dkv0 = tuple(jnp.zeros_like(kv_chunks[0], jnp.float32) for _ in range(2))
  (dk, dv), dq = jax.lax.scan(q_step, dkv0, q_chunks)
  return _merge(dq, 1), _merge(dk, 1), _merge(dv, 1)


# --------------------------------------------------------------------------- zig-zag cases

# Which half of the local queries / of the visiting K/V block a ring step touches.
_DIAG, _EARLY_KV, _LATE_Q = 0, 1, 2


def _case(step, axis_name, n, causal):
  if not causal:
    return None
  if isinstance(step, int) and step == 0:
    return _DIAG
  owner = (jax.lax.axis_index(axis_name) - step) % n
  return jnp.where(owner < jax.lax.axis_index(axis_name), _EARLY_KV, _LATE_Q)


def _half(x, which):
  h = x.shape[1] // 2
  return x[:, :h] if which == 0 else x[:, h:]


def _fwd_step(acc, q, kv, case, **kw):
  """One ring step of the forward pass; `case` picks the half blocks (see module doc)."""
  q_BLKGd, pos_BL, seg_BL = q
  if case is None or isinstance(case, int):
    return _block_fwd(acc, q_BLKGd, pos_BL, seg_BL, kv, **kw)

  def early_kv(acc):
    return _block_fwd(acc, q_BLKGd, pos_BL, seg_BL, [_half(a, 0) for a in kv], **kw)

  def late_q(acc):
    # Rows of the early query chunk are untouched: update the late half only.
    o, m, den = acc
    o2, m2, den2 = _block_fwd(
      (_half(o, 1), m[..., m.shape[-1] // 2 :], den[..., den.shape[-1] // 2 :]),
      _half(q_BLKGd, 1), _half(pos_BL, 1), _half(seg_BL, 1), kv, **kw,
    )  # fmt: skip
    h = m.shape[-1] // 2
    return (
      jnp.concatenate([_half(o, 0), o2], 1),
      jnp.concatenate([m[..., :h], m2], -1),
      jnp.concatenate([den[..., :h], den2], -1),
    )

  return jax.lax.cond(case == _EARLY_KV, early_kv, late_q, acc)


def _bwd_step(q, do, lse, delta, kv, case, **kw):
  """One ring step of the backward pass: (dq, dk, dv) for the visiting block, full shapes."""
  q_BLKGd, pos_BL, seg_BL = q
  if case is None or isinstance(case, int):
    return _block_bwd(q_BLKGd, pos_BL, seg_BL, do, lse, delta, kv, **kw)
  h = q_BLKGd.shape[1] // 2

  def early_kv(_):
    dq, dk, dv = _block_bwd(
      q_BLKGd, pos_BL, seg_BL, do, lse, delta, [_half(a, 0) for a in kv], **kw
    )
    pad = jnp.zeros_like(dk)
    return dq, jnp.concatenate([dk, pad], 1), jnp.concatenate([dv, pad], 1)

  def late_q(_):
    dq, dk, dv = _block_bwd(
      _half(q_BLKGd, 1), _half(pos_BL, 1), _half(seg_BL, 1), _half(do, 1),
      lse[..., h:], delta[..., h:], kv, **kw,
    )  # fmt: skip
    return jnp.concatenate([jnp.zeros_like(dq), dq], 1), dk, dv

  return jax.lax.cond(case == _EARLY_KV, early_kv, late_q, None)


# --------------------------------------------------------------------------- the ring


def _rotate(tree, axis_name, n):
  """Sends every array to the next device on the ring (device i receives from i - 1)."""
  perm = [(i, (i + 1) % n) for i in range(n)]
  return jax.tree.map(lambda a: jax.lax.ppermute(a, axis_name, perm), tree)


def _ring_loop(n, state, kv, step_fn, rotate, before_step=lambda s: s):
  """Runs step_fn over the n ring steps, prefetching the next K/V while computing.

  The last step is peeled so K/V rotate exactly n - 1 times.
  """
  state = step_fn(state, kv, 0)
  if n == 1:
    return state
  nxt = rotate(kv)

  def body(carry, step):
    state, kv = carry
    nxt = rotate(kv)  # independent of this step's compute, so XLA may overlap them
    return (step_fn(before_step(state), kv, step), nxt), None

  if n > 2:
    (state, nxt), _ = jax.lax.scan(body, (state, nxt), jnp.arange(1, n - 1))
  return step_fn(before_step(state), nxt, n - 1)


@dataclasses.dataclass(frozen=True)
class _Ring:
  """Static settings of one ring (hashable: a non-differentiable custom_vjp argument)."""

  axis_name: str
  n: int
  causal: bool
  chunk: int
  scale: float | None

  def case(self, step):
    return _case(step, self.axis_name, self.n, self.causal)

  def rotate(self, tree):
    return _rotate(tree, self.axis_name, self.n)

  def split_heads(self, q_BLHd, k_BLKd):
    """q as [B, L, K, G, d] and the keyword arguments of the block functions."""
    b, length, h, d = q_BLHd.shape
    kh = k_BLKd.shape[2]
    scale = d**-0.5 if self.scale is None else self.scale
    return q_BLHd.reshape(b, length, kh, h // kh, d), dict(
      causal=self.causal, chunk=self.chunk, scale=scale
    )


def _ring_fwd(r: _Ring, q_BLHd, k_BLKd, v_BLKd, pos_BL, seg_BL):
  """Per-device forward ring; saves (inputs, out, log-sum-exp) for the backward ring."""
  q_BLKGd, kw = r.split_heads(q_BLHd, k_BLKd)
  qq = (q_BLKGd, pos_BL, seg_BL)
  # *_like keeps the shard_map "varying" type of the inputs for the scan carries.
  row_BKGL = jnp.moveaxis(q_BLKGd[..., 0], 1, 3)
  acc = (
    jnp.zeros_like(q_BLKGd, jnp.float32),
    jnp.full_like(row_BKGL, _NEG, jnp.float32),
    jnp.zeros_like(row_BKGL, jnp.float32),
  )

  def step(acc, kv, s):
    return _fwd_step(acc, qq, kv, r.case(s), **kw)

  o, m, den = _ring_loop(r.n, acc, [k_BLKd, v_BLKd, pos_BL, seg_BL], step, r.rotate)
  safe = jnp.where(den > 0, den, 1.0)
  out = (o / jnp.moveaxis(safe, 3, 1)[..., None]).reshape(q_BLHd.shape).astype(q_BLHd.dtype)
  lse_BKGL = jnp.where(den > 0, m + jnp.log(safe), 0.0)
  return out, (q_BLHd, k_BLKd, v_BLKd, pos_BL, seg_BL, out, lse_BKGL)


def _ring_bwd(r: _Ring, res, do_BLHd):
  """Per-device backward ring: dQ stays home, dK/dV travel with their K/V block."""
  q_BLHd, k_BLKd, v_BLKd, pos_BL, seg_BL, out_BLHd, lse_BKGL = res
  q_BLKGd, kw = r.split_heads(q_BLHd, k_BLKd)
  do_BLKGd = do_BLHd.reshape(q_BLKGd.shape)
  delta = jnp.sum(do_BLKGd.astype(jnp.float32) * out_BLHd.reshape(q_BLKGd.shape), -1)
  delta_BKGL = jnp.moveaxis(delta, 1, 3)
  qq = (q_BLKGd, pos_BL, seg_BL)

  def step(state, kv, s):
    grads = _bwd_step(qq, do_BLKGd, lse_BKGL, delta_BKGL, kv, r.case(s), **kw)
    return tuple(a + b for a, b in zip(state, grads, strict=True))

  zeros = tuple(jnp.zeros_like(x, jnp.float32) for x in (q_BLKGd, k_BLKd, v_BLKd))
  # One hop of dK/dV before each later step (to meet their K/V), one more to get home.
  hop = lambda st: (st[0], *r.rotate(st[1:]))
  kv = [k_BLKd, v_BLKd, pos_BL, seg_BL]
  dq, dk, dv = _ring_loop(r.n, zeros, kv, step, r.rotate, before_step=hop)
  if r.n > 1:
    dq, dk, dv = hop((dq, dk, dv))
  return (
    dq.reshape(q_BLHd.shape).astype(q_BLHd.dtype),
    dk.astype(k_BLKd.dtype),
    dv.astype(v_BLKd.dtype),
    None,  # positions and segment ids are integers: no cotangent
    None,
  )


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _ring(r: _Ring, q_BLHd, k_BLKd, v_BLKd, pos_BL, seg_BL):
  """The per-device body of ring attention (inside shard_map)."""
  return _ring_fwd(r, q_BLHd, k_BLKd, v_BLKd, pos_BL, seg_BL)[0]


_ring.defvjp(_ring_fwd, _ring_bwd)


def _specs(mesh, axis_name, rules):
  """PartitionSpecs (q, kv, tokens) with the sequence dim on `axis_name`."""
  spec = rules_lib.logical_to_spec(("batch", None, "heads", None), rules, mesh)
  kv_spec = rules_lib.logical_to_spec(("batch", None, "kv_heads", None), rules, mesh)

  def drop(entry):
    axes = (entry,) if isinstance(entry, str) else tuple(entry or ())
    axes = tuple(a for a in axes if a != axis_name)
    return None if not axes else axes[0] if len(axes) == 1 else axes

  q = PartitionSpec(drop(spec[0]), axis_name, drop(spec[2]), None)
  kv = PartitionSpec(drop(kv_spec[0]), axis_name, drop(kv_spec[2]), None)
  return q, kv, PartitionSpec(q[0], axis_name)


def _place(x, mesh, spec):
  """Reshards `x` to `spec`: `reshard` on Explicit mesh axes, a constraint on Auto ones."""
  used = [a for e in spec for a in ((e,) if isinstance(e, str) else (e or ()))]
  explicit = jax.sharding.AxisType.Explicit
  types = dict(zip(mesh.axis_names, mesh.axis_types, strict=True))
  if used and all(types[a] == explicit for a in used):
    return jax.reshard(x, NamedSharding(mesh, spec))
  return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def _pick_chunk(block: int, chunk: int) -> int:
  """Largest divisor of `block` that is <= chunk (key chunks must tile a half block)."""
  return max(c for c in range(1, min(block, max(chunk, 1)) + 1) if block % c == 0)


def ring_attention(
  q_BTHd,
  k_BTKd,
  v_BTKd,
  *,
  mesh=None,
  positions_BT=None,
  segment_ids_BT=None,
  causal: bool = True,
  axis_name: str = "sequence",
  chunk: int = 512,
  scale: float | None = None,
  rules=None,
):
  """Self-attention with the sequence sharded over `axis_name`, inputs in zig-zag layout.

  Args:
    q_BTHd, k_BTKd, v_BTKd: global arrays whose T axis is in zig-zag order (`to_zigzag`).
    mesh: the device mesh; defaults to the one active in `parallel.rules.use_mesh_rules`.
    positions_BT: positions of the tokens (zig-zag order); default: the natural positions
      `zigzag_indices(T, n)`, i.e. one unpacked sequence per row.
    segment_ids_BT: packed-sequence ids, 0 = padding (default: all ones).
    causal: causal mask by position.
    axis_name: the ring's mesh axis. Batch and heads are sharded by the rules table.
    chunk: query and key chunk inside a block (the largest divisor of T / 2n that is
      <= chunk); the live score block is chunk x chunk per device.
    scale: score scale, 1/sqrt(d) by default.
    rules: logical-axis rules (default: the active ones).

  Returns:
    out_BTHd in the same (zig-zag) order, sharded like q.
  """
  mesh = mesh if mesh is not None else rules_lib.current_mesh()
  if mesh is None or axis_name not in mesh.shape:
    raise ValueError(f"ring_attention needs a mesh with a {axis_name!r} axis, got {mesh}")
  n = mesh.shape[axis_name]
  b, t, h, _ = q_BTHd.shape
  kh = k_BTKd.shape[2]
  if t % (2 * n):
    raise ValueError(f"sequence length {t} must be divisible by 2 * {axis_name} size = {2 * n}")
  if h % kh:
    raise ValueError(f"query heads ({h}) must be a multiple of kv heads ({kh})")
  if positions_BT is None:
    positions_BT = jnp.broadcast_to(jnp.asarray(zigzag_indices(t, n), jnp.int32), (b, t))
  if segment_ids_BT is None:
    segment_ids_BT = jnp.ones((b, t), jnp.int32)
  q_spec, kv_spec, bt_spec = _specs(mesh, axis_name, rules)
  ring = _Ring(axis_name, n, causal, _pick_chunk(t // (2 * n), chunk), scale)
  fn = jax.shard_map(
    functools.partial(_ring, ring),
    mesh=mesh,
    in_specs=(q_spec, kv_spec, kv_spec, bt_spec, bt_spec),
    out_specs=q_spec,
  )
  args = (q_BTHd, k_BTKd, v_BTKd, positions_BT.astype(jnp.int32), segment_ids_BT.astype(jnp.int32))
  specs = (q_spec, kv_spec, kv_spec, bt_spec, bt_spec)
  return fn(*(_place(a, mesh, s) for a, s in zip(args, specs, strict=True)))
