"""Small building blocks: RMSNorm, SwiGLU MLP, dtype helpers.

Legend: B batch, T tokens, D d_model, F d_ff, N any trailing feature axis.
"""

from __future__ import annotations

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


def swiglu(x_BTD: jax.Array, w_gate_DF, w_up_DF, w_down_FD) -> jax.Array:
  """down(silu(x @ gate) * (x @ up)); weights are cast to x's (compute) dtype."""
  dt = x_BTD.dtype
  g_BTF = jnp.einsum("btd,df->btf", x_BTD, w_gate_DF.astype(dt))
  u_BTF = jnp.einsum("btd,df->btf", x_BTD, w_up_DF.astype(dt))
  h_BTF = constrain(jax.nn.silu(g_BTF) * u_BTF, ("batch", "length", "mlp"))
  return jnp.einsum("btf,fd->btd", h_BTF, w_down_FD.astype(dt))
