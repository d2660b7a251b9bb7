"""Attention: a naive reference and a chunked online-softmax (flash-style) kernel.

Both take queries with their positions and keys/values with theirs, so the same call
serves training, packed sequences and decoding against a KV cache (offset queries).

Mask convention: query t may see key s iff
  k_seg[s] != 0  and  q_seg[t] == k_seg[s]  and  (not causal or k_pos[s] <= q_pos[t]).
Segment id 0 therefore marks padding (an empty cache slot or a pad token); a query whose
keys are all masked gets a zero output. Without segment ids every token is in segment 1.

The chunked kernel is pure JAX with a custom VJP that recomputes probabilities from the
saved log-sum-exp, so memory is linear in sequence length in the forward and backward
pass; blocks that causality masks entirely are skipped with `lax.cond`. (Pallas kernels
would be faster on GPU/TPU but do not run on CPU, where this must be fast too.)

Legend: B batch, T query tokens, S key tokens, H query heads, K kv heads, G = H // K,
d head_dim, C chunk length, n number of chunks.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

_NEG = -1e30  # finite "minus infinity": keeps (s - max) free of inf - inf = nan
_F32 = jnp.float32


def _mask(q_pos, k_pos, q_seg, k_seg, causal):
  """Boolean mask [..., Tq, Sk] from [..., Tq] / [..., Sk] positions and segments."""
  ok = (k_seg[..., None, :] != 0) & (q_seg[..., :, None] == k_seg[..., None, :])
  if causal:
    ok &= k_pos[..., None, :] <= q_pos[..., :, None]
  return ok


def _defaults(q_pos, k_pos, q_seg, k_seg):
  q_seg = jnp.ones_like(q_pos) if q_seg is None else q_seg
  k_seg = jnp.ones_like(k_pos) if k_seg is None else k_seg
  return q_pos, k_pos, q_seg, k_seg


def naive_attend(q_BTHd, k_BSKd, v_BSKd, q_pos, k_pos, q_seg, k_seg, causal, scale):
  """The full [T, S] score matrix: the reference implementation."""
  B, T, H, d = q_BTHd.shape
  K = k_BSKd.shape[2]
  q_BTKGd = q_BTHd.reshape(B, T, K, H // K, d)
  s = jnp.einsum("btkgd,bskd->bkgts", q_BTKGd, k_BSKd, preferred_element_type=_F32) * scale
  mask = _mask(q_pos, k_pos, q_seg, k_seg, causal)[:, None, None]
  s = jnp.where(mask, s, _NEG)
  p = jnp.where(mask, jnp.exp(s - jnp.max(s, axis=-1, keepdims=True)), 0.0)
  denom = jnp.sum(p, axis=-1, keepdims=True)
  p = p / jnp.where(denom == 0, 1.0, denom)
  out = jnp.einsum("bkgts,bskd->btkgd", p.astype(v_BSKd.dtype), v_BSKd, preferred_element_type=_F32)
  return out.reshape(B, T, H, d).astype(q_BTHd.dtype)


# ------------------------------------------------------------------ chunked kernel
# Internal layout: q [nq, B, K, M, d] with M = G*C rows (group-major), k/v [nk, B, K, C, d],
# pos/seg [n, B, C]. Every matmul then has one contracting dim, which XLA:CPU maps to a
# plain dot without transposing copies.


def _needed(q_pos_BC, k_pos_BC, causal):
  """False when causality masks the whole block (padded slots carry extreme positions)."""
  return jnp.min(k_pos_BC) <= jnp.max(q_pos_BC) if causal else jnp.bool_(True)


def _scan(f, init, xs):
  """lax.scan, but a length-1 scan is a plain call (smaller programs, faster compiles)."""
  if jax.tree.leaves(xs)[0].shape[0] > 1:
    return jax.lax.scan(f, init, xs)
  carry, y = f(init, jax.tree.map(lambda a: a[0], xs))
  return carry, jax.tree.map(lambda a: a[None], y)


def _maybe(needed, step, carry, single_block):
  """Runs `step` only where the block has visible keys (always when it is the only one)."""
  return step(carry) if single_block else jax.lax.cond(needed, step, lambda c: c, carry)


def _masked(s_BKMS, mask_BCS):
  """Masked scores (the G query groups of a row share its mask)."""
  B, K, M, S = s_BKMS.shape
  C = mask_BCS.shape[1]
  s = s_BKMS.reshape(B, K, M // C, C, S)
  return jnp.where(mask_BCS[:, None, None], s, _NEG).reshape(B, K, M, S)


def _fwd_block(carry, q, k, v, mask):
  m, denom, acc = carry
  s = _masked(jnp.einsum("bkmd,bksd->bkms", q, k, preferred_element_type=_F32), mask)
  m_new = jnp.maximum(m, jnp.max(s, axis=-1))
  # Masked scores give exp(_NEG - m_new) = 0 once a row has seen any visible key; until
  # then m_new == _NEG and the junk they add is wiped by corr = 0 (or zeroed at the end).
  p = jnp.exp(s - m_new[..., None])
  corr = jnp.exp(m - m_new)
  denom = denom * corr + jnp.sum(p, axis=-1)
  pv = jnp.einsum("bkms,bksd->bkmd", p.astype(v.dtype), v, preferred_element_type=_F32)
  return m_new, denom, acc * corr[..., None] + pv


def _flash_fwd_impl(q, k, v, q_pos, k_pos, q_seg, k_seg, causal):
  _, B, K, M, d = q.shape
  single = q.shape[0] == k.shape[0] == 1

  def per_q_chunk(_, xq):
    q_i, qp_i, qs_i = xq

    def per_kv_chunk(carry, xk):
      k_j, v_j, kp_j, ks_j = xk
      mask = _mask(qp_i, kp_j, qs_i, ks_j, causal)
      step = functools.partial(_fwd_block, q=q_i, k=k_j, v=v_j, mask=mask)
      return _maybe(_needed(qp_i, kp_j, causal), step, carry, single), None

    init = (
      jnp.full((B, K, M), _NEG, _F32),
      jnp.zeros((B, K, M), _F32),
      jnp.zeros((B, K, M, d), _F32),
    )
    (m, denom, acc), _ = _scan(per_kv_chunk, init, (k, v, k_pos, k_seg))
    empty = m == _NEG  # no visible key: output 0, and lse = -_NEG makes every p = 0
    out = jnp.where(empty[..., None], 0.0, acc / jnp.where(empty, 1.0, denom)[..., None])
    lse = jnp.where(empty, -_NEG, m + jnp.log(jnp.where(empty, 1.0, denom)))
    return None, (out.astype(q.dtype), lse)

  _, (out, lse) = _scan(per_q_chunk, None, (q, q_pos, q_seg))
  return out, lse


def _bwd_block(carry, q, k, v, do, lse, delta, mask):
  dq, dk, dv = carry
  s = jnp.einsum("bkmd,bksd->bkms", q, k, preferred_element_type=_F32)
  p = jnp.exp(_masked(s, mask) - lse[..., None])
  dv = dv + jnp.einsum("bkms,bkmd->bksd", p.astype(do.dtype), do, preferred_element_type=_F32)
  dp = jnp.einsum("bkmd,bksd->bkms", do, v, preferred_element_type=_F32)
  ds = (p * (dp - delta[..., None])).astype(q.dtype)
  dq = dq + jnp.einsum("bkms,bksd->bkmd", ds, k, preferred_element_type=_F32)
  dk = dk + jnp.einsum("bkms,bkmd->bksd", ds, q, preferred_element_type=_F32)
  return dq, dk, dv


def _flash_bwd_impl(res, do, causal):
  q, k, v, q_pos, k_pos, q_seg, k_seg, out, lse = res
  delta = jnp.sum(do.astype(_F32) * out.astype(_F32), axis=-1)  # [nq, B, K, M]
  _, B, K, Ck, d = k.shape
  single = q.shape[0] == k.shape[0] == 1

  def per_kv_chunk(dq_all, xk):
    k_j, v_j, kp_j, ks_j = xk

    def per_q_chunk(carry, xq):
      dk, dv = carry
      q_i, do_i, lse_i, dl_i, qp_i, qs_i, dq_i = xq
      mask = _mask(qp_i, kp_j, qs_i, ks_j, causal)
      step = functools.partial(
        _bwd_block, q=q_i, k=k_j, v=v_j, do=do_i, lse=lse_i, delta=dl_i, mask=mask
      )
      dq_i, dk, dv = _maybe(_needed(qp_i, kp_j, causal), step, (dq_i, dk, dv), single)
      return (dk, dv), dq_i

    zeros = jnp.zeros((B, K, Ck, d), _F32)
    xs = (q, do, lse, delta, q_pos, q_seg, dq_all)
    (dk, dv), dq_all = _scan(per_q_chunk, (zeros, zeros), xs)
    return dq_all, (dk, dv)

  dq, (dk, dv) = _scan(per_kv_chunk, jnp.zeros(q.shape, _F32), (k, v, k_pos, k_seg))
  return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None, None)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7,))
def _flash(q, k, v, q_pos, k_pos, q_seg, k_seg, causal):
  """Attention of pre-scaled queries in the chunked layout (custom VJP, linear memory)."""
  return _flash_fwd_impl(q, k, v, q_pos, k_pos, q_seg, k_seg, causal)[0]


def _flash_fwd(q, k, v, q_pos, k_pos, q_seg, k_seg, causal):
  out, lse = _flash_fwd_impl(q, k, v, q_pos, k_pos, q_seg, k_seg, causal)
  return out, (q, k, v, q_pos, k_pos, q_seg, k_seg, out, lse)


def _flash_bwd(causal, res, do):
  return _flash_bwd_impl(res, do, causal)


_flash.defvjp(_flash_fwd, _flash_bwd)


def _pad_to(x, n, axis, value):
  extra = n - x.shape[axis]
  if extra == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, extra)
  return jnp.pad(x, widths, constant_values=value)


def chunked_attend(q_BTHd, k_BSKd, v_BSKd, q_pos, k_pos, q_seg, k_seg, causal, scale, chunk):
  """Flash-style attention over chunks of queries and keys (see module docstring)."""
  B, T, H, d = q_BTHd.shape
  S, K = k_BSKd.shape[1], k_BSKd.shape[2]
  G = H // K
  # As few chunks as `chunk` allows, balanced so padding is under one row per chunk
  # (T=192, chunk=128 -> 2 x 96 rather than 2 x 128 with 64 padded rows).
  nq, nk = -(-T // chunk), -(-S // chunk)
  cq, ck = -(-T // nq), -(-S // nk)
  big = jnp.iinfo(jnp.int32).max // 2
  # Padded queries sit before every key and padded keys after every query; both get
  # segment 0, so they neither see nor are seen, and never force a block to run.
  q_pos = _pad_to(q_pos.astype(jnp.int32), nq * cq, 1, -big)
  k_pos = _pad_to(k_pos.astype(jnp.int32), nk * ck, 1, big)
  q_seg = _pad_to(q_seg.astype(jnp.int32), nq * cq, 1, 0)
  k_seg = _pad_to(k_seg.astype(jnp.int32), nk * ck, 1, 0)
  # The score scale is folded into q: T*H*d multiplies instead of T*S*H.
  q = (
    _pad_to(q_BTHd * jnp.asarray(scale, q_BTHd.dtype), nq * cq, 1, 0)
    .reshape(B, nq, cq, K, G, d)
    .transpose(1, 0, 3, 4, 2, 5)
    .reshape(nq, B, K, G * cq, d)
  )
  k = _pad_to(k_BSKd, nk * ck, 1, 0).reshape(B, nk, ck, K, d).transpose(1, 0, 3, 2, 4)
  v = _pad_to(v_BSKd, nk * ck, 1, 0).reshape(B, nk, ck, K, d).transpose(1, 0, 3, 2, 4)

  def chunks(x, c):
    return x.reshape(B, -1, c).transpose(1, 0, 2)

  out = _flash(
    q,
    k,
    v,
    chunks(q_pos, cq),
    chunks(k_pos, ck),
    chunks(q_seg, cq),
    chunks(k_seg, ck),
    causal,
  )
  out = out.reshape(nq, B, K, G, cq, d).transpose(1, 0, 4, 2, 3, 5).reshape(B, nq * cq, H, d)
  return out[:, :T]


def attend(
  q_BTHd,
  k_BSKd,
  v_BSKd,
  *,
  q_pos_BT,
  k_pos_BS,
  q_seg_BT=None,
  k_seg_BS=None,
  causal=True,
  impl="chunked",
  chunk=512,
  scale=None,
):
  """Grouped-query attention; returns out_BTHd in q's dtype (softmax in fp32).

  Args:
    q_BTHd, k_BSKd, v_BSKd: queries, keys, values; H must be a multiple of K.
    q_pos_BT, k_pos_BS: integer positions; causality compares them (not indices), so
      queries may be offset against a cache. A leading dim of 1 is broadcast.
    q_seg_BT, k_seg_BS: optional segment ids (0 = padding), see the module docstring.
    impl: 'chunked' (default, linear memory), 'naive' (reference), or 'ring', which is a
      model-level choice (`transformer.apply` runs parallel.ring_attention over the mesh's
      `sequence` axis) and here, for a cache or without such a mesh, means 'chunked'.
    chunk: longest query / key chunk of the chunked kernel (chunks are balanced).
    scale: score scale, 1/sqrt(d) by default.
  """
  if q_BTHd.shape[2] % k_BSKd.shape[2]:
    raise ValueError(f"{q_BTHd.shape[2]} query heads not a multiple of {k_BSKd.shape[2]}")
  scale = float(q_BTHd.shape[-1] ** -0.5 if scale is None else scale)
  B, T, S = q_BTHd.shape[0], q_BTHd.shape[1], k_BSKd.shape[1]
  args = _defaults(q_pos_BT, k_pos_BS, q_seg_BT, k_seg_BS)
  # Positions / segments may be given for one row and shared by the batch.
  args = [jnp.broadcast_to(a, (B, n)) for a, n in zip(args, (T, S, T, S), strict=True)]
  if impl == "naive":
    return naive_attend(q_BTHd, k_BSKd, v_BSKd, *args, causal, scale)
  if impl in ("chunked", "ring"):
    return chunked_attend(q_BTHd, k_BSKd, v_BSKd, *args, causal, scale, chunk)
  raise ValueError(f"attention impl {impl!r} not in ('chunked', 'naive', 'ring')")
