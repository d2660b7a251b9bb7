"""Int8 weight quantisation for rollouts (symmetric, per output channel; W8A8 matmuls).

Every matmul weight w is stored as int8 q with a float32 scale per output channel
(scale = max|w| over the contracted axes / 127), so weights take 4x less memory than fp32. The
tied embedding is quantised per vocabulary row (it serves both the lookup and the LM head).
Norms and biases stay fp32. The engine runs these weights as they are: `layers.dense` quantises
each activation row to int8 too and multiplies int8 x int8 into int32 (W8A8), and
`transformer.embed` dequantises only the rows it looks up; only MoE expert weights (ragged
dots) are dequantised inside the step. Dequantising every weight each step instead (an fp32
copy of the model per decode step: XLA:CPU does not fuse the conversion into the matmul) made
the tier ~5x slower than fp32; speed and drift are measured by benchmarks/generate.py --tiers.

Why not qwix (0.1.8 installs and imports here): its PTQ works by intercepting the einsums of
Flax linen/nnx modules, matched by module path; our model is pure functions over a params
dict, so the small path below is simpler than adapting the model to qwix's interception.

Legend: L layers, D width, H heads, K kv heads, d head_dim, F d_ff, V vocab.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp

# weight name -> axes contracted in the model's einsum (scale is shared along these)
_CONTRACTED = {
  "wq": (1,),  # [L, D, H, d]
  "wk": (1,),
  "wv": (1,),
  "wo": (1, 2),  # [L, H, d, D]
  "w_gate": (1,),  # [L, D, F]
  "w_up": (1,),
  "w_down": (1,),  # [L, F, D]
  "we_gate": (2,),  # [L, E, D, F]
  "we_up": (2,),
  "we_down": (2,),  # [L, E, F, D]
}


def _quantize(w, axes):
  w = w.astype(jnp.float32)
  scale = jnp.max(jnp.abs(w), axis=axes, keepdims=True) / 127.0
  safe = jnp.where(scale > 0, scale, 1.0)
  q = jnp.clip(jnp.round(w / safe), -127, 127).astype(jnp.int8)
  return {"int8": q, "scale": scale}


def is_quantized(params) -> bool:
  return isinstance(params.get("embed"), dict)


def quantize_params(params):
  """fp params -> the same tree with each matmul weight replaced by {'int8', 'scale'}."""
  layers = {
    n: _quantize(w, _CONTRACTED[n]) if n in _CONTRACTED else w for n, w in params["layers"].items()
  }
  out = dict(params, layers=layers, embed=_quantize(params["embed"], (1,)))
  if "lm_head" in params:
    out["lm_head"] = _quantize(params["lm_head"], (0,))  # [D, V]: contracted over D
  return out


def dequantize_weight(x, dtype=jnp.float32):
  """q * scale for one quantised weight (identity on an fp array)."""
  return (x["int8"].astype(dtype) * x["scale"].astype(dtype)) if isinstance(x, dict) else x


def dequantize(qparams, dtype=jnp.float32):
  """The fp params the int8 ones stand for (identity on params that are not quantised)."""
  deq = functools.partial(dequantize_weight, dtype=dtype)
  if not is_quantized(qparams):
    return qparams
  top = {k: deq(v) for k, v in qparams.items() if k != "layers"}
  top["layers"] = {k: deq(v) for k, v in qparams["layers"].items()}
  return top


def max_abs_error(params, qparams):
  """Largest |w - dequant(q)| / scale over all weights (<= 0.5 by construction)."""
  deq = dequantize(qparams)
  worst = 0.0
  for name, w in params["layers"].items():
    if name in _CONTRACTED:
      err = jnp.abs(w - deq["layers"][name]) / qparams["layers"][name]["scale"]
      worst = max(worst, float(jnp.max(err)))
  return worst
