"""Small building blocks: RMSNorm, SwiGLU MLP, dtype helpers.

Legend: B batch, T tokens, D d_model, F d_ff, N any trailing feature axis.
"""

from __future__ import annotations

import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from parallel.rules import constrain


def dtype_of(name: str):
  return {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[name]


def rms_norm(x_BTN: jax.Array, w_N: jax.Array, eps: float) -> jax.Array:
  """HF RMSNorm: normalise in fp32, cast back, then scale by the weight."""
  x = x_BTN.astype(jnp.float32)
  var = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
  y = (x * jax.lax.rsqrt(var + eps)).astype(x_BTN.dtype)
  w = w_N.astype(x_BTN.dtype).reshape((1,) * (x_BTN.ndim - 1) + w_N.shape)
  return (w * y).astype(x_BTN.dtype)


@flax.struct.dataclass
class LoraWeight:
  """A frozen weight `w` [*in, *out] plus the rank-r update scale * a [*in, r] @ b [r, *out].

  `dense` applies it factorised (never forming a @ b); models.lora builds and merges these.
  """

  w: Any
  a: jax.Array
  b: jax.Array
  scale: float = flax.struct.field(pytree_node=False)


def dense(x, w, n_in: int = 1, out_dtype=None, transpose_w: bool = False) -> jax.Array:
  """x [..., *in] @ w [*in, *out] (or w [*out, *in] if transpose_w) as one 2-D matmul.

  Flattening to 2-D keeps a single contracting dim in the backward pass too: with two
  (e.g. batch and length in a weight gradient) XLA:CPU inserts transposing copies of
  the activations, which cost ~20% of a training step. `w` may be an int8 weight
  {'int8': q, 'scale': s} (models.quant): then the matmul is W8A8 (_int8_dot), or a
  LoraWeight: then x @ w + scale * (x @ a) @ b.
  """
  if isinstance(w, LoraWeight):
    y = dense(x, w.w, n_in, out_dtype)
    h = dense(x, w.a, n_in)
    return y + (w.scale * dense(h, w.b)).astype(y.dtype)
  n_in_elems = math.prod(x.shape[x.ndim - n_in :])
  x2 = x.reshape(-1, n_in_elems)
  q = w["int8"] if isinstance(w, dict) else w.astype(x.dtype)
  if transpose_w:
    out_shape = q.shape[: q.ndim - n_in]
    w2 = q.reshape(-1, n_in_elems).T
  else:
    out_shape = q.shape[n_in:]
    w2 = q.reshape(n_in_elems, -1)
  if isinstance(w, dict):
    y = _int8_dot(x2, w2, w["scale"]).astype(out_dtype or x.dtype)
  else:
    y = jnp.dot(x2, w2, preferred_element_type=out_dtype)
  return y.reshape(*x.shape[: x.ndim - n_in], *out_shape)


def _int8_dot(x_MK, q_KN, scale):
  """W8A8: each row of x is quantised symmetrically to int8 (scale max|row| / 127), the dot
  accumulates in int32 and both scales (the weight's: one per output column) apply to the
  result, in fp32. On XLA:CPU the int8 dot beats an fp32 one at decode shapes, where
  dequantising the weights first (an fp32 copy every step) made the int8 tier 5x slower."""
  xf = x_MK.astype(jnp.float32)
  xs_M1 = jnp.max(jnp.abs(xf), axis=1, keepdims=True) / 127.0
  xs_M1 = jnp.where(xs_M1 > 0, xs_M1, 1.0)
  xq = jnp.clip(jnp.round(xf / xs_M1), -127, 127).astype(jnp.int8)
  acc = jnp.dot(xq, q_KN, preferred_element_type=jnp.int32)
  return acc.astype(jnp.float32) * xs_M1 * scale.reshape(1, -1).astype(jnp.float32)


def swiglu(x_BTD: jax.Array, w_gate_DF, w_up_DF, w_down_FD) -> jax.Array:
  """down(silu(x @ gate) * (x @ up)); weights are cast to x's (compute) dtype."""
  g_BTF = dense(x_BTD, w_gate_DF)
  u_BTF = dense(x_BTD, w_up_DF)
  h_BTF = constrain(jax.nn.silu(g_BTF) * u_BTF, ("batch", "length", "mlp"))
  return dense(h_BTF, w_down_FD)
