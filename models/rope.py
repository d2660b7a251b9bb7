"""Rotary position embeddings with Hugging Face's scaling variants.

Frequencies follow `transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS` (none, linear,
dynamic NTK, YaRN, llama3); the rotation is the "rotate half" layout Llama/Qwen use.
Legend: B batch, T tokens, N heads (any), d head_dim, F = d // 2 frequencies.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from models.config import ModelConfig, RopeScaling


def _base_inv_freq(theta: float, dim: int) -> np.ndarray:
  return 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim))


def _llama3(inv: np.ndarray, rs: RopeScaling, max_len: int) -> np.ndarray:
  old = rs.original_max_position_embeddings or max_len
  low_wav, high_wav = old / rs.low_freq_factor, old / rs.high_freq_factor
  wav = 2 * math.pi / inv
  out = np.where(wav > low_wav, inv / rs.factor, inv)
  smooth = (old / wav - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor)
  smoothed = (1 - smooth) * out / rs.factor + smooth * out
  medium = ~(wav < high_wav) & ~(wav > low_wav)
  return np.where(medium, smoothed, out).astype(np.float32)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
  return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(theta: float, dim: int, rs: RopeScaling, max_len: int) -> tuple[np.ndarray, float]:
  orig = rs.original_max_position_embeddings or max_len
  factor = rs.factor
  if rs.attention_factor is not None:
    att = rs.attention_factor
  elif rs.mscale and rs.mscale_all_dim:
    att = _yarn_mscale(factor, rs.mscale) / _yarn_mscale(factor, rs.mscale_all_dim)
  else:
    att = _yarn_mscale(factor)

  def corr_dim(rot):
    return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(theta))

  low, high = corr_dim(rs.beta_fast), corr_dim(rs.beta_slow)
  if rs.truncate:
    low, high = math.floor(low), math.ceil(high)
  low, high = max(low, 0), min(high, dim - 1)
  if low == high:
    high += 0.001  # as HF: avoid a zero-width ramp
  ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
  extra = 1.0 - ramp  # 1 = keep the original (extrapolated) frequency
  pos = theta ** (np.arange(0, dim, 2).astype(np.float32) / dim)
  inv = (1.0 / (factor * pos)) * (1 - extra) + (1.0 / pos) * extra
  return inv.astype(np.float32), float(att)


def inv_freq(cfg: ModelConfig, seq_len=None) -> tuple[jax.Array | np.ndarray, float]:
  """Returns (inv_freq_F, attention_scaling) for `cfg`.

  `seq_len` (a traced scalar allowed) is only used by dynamic NTK: HF recomputes the base
  from max(position)+1 when it exceeds max_position_embeddings.
  """
  rs, dim, theta = cfg.rope_scaling, cfg.head_dim, cfg.rope_theta
  if rs.kind == "none":
    return _base_inv_freq(theta, dim), 1.0
  if rs.kind == "linear":
    return _base_inv_freq(theta, dim) / np.float32(rs.factor), 1.0
  if rs.kind == "llama3":
    return _llama3(_base_inv_freq(theta, dim), rs, cfg.max_seq_len), 1.0
  if rs.kind == "yarn":
    return _yarn(theta, dim, rs, cfg.max_seq_len)
  # dynamic NTK
  max_len = cfg.max_seq_len
  length = max_len if seq_len is None else jnp.maximum(seq_len, max_len)
  base = theta * ((rs.factor * length / max_len) - (rs.factor - 1)) ** (dim / (dim - 2))
  expo = jnp.arange(0, dim, 2, dtype=jnp.float32) / dim
  return 1.0 / (jnp.asarray(base, jnp.float32) ** expo), 1.0


def cos_sin(positions_BT: jax.Array, cfg: ModelConfig) -> tuple[jax.Array, jax.Array]:
  """cos/sin tables [B, T, d] in fp32 (attention scaling folded in, as HF does)."""
  seq_len = None
  if cfg.rope_scaling.kind == "dynamic":
    seq_len = jnp.max(positions_BT) + 1
  inv_F, scale = inv_freq(cfg, seq_len)
  freqs_BTF = (
    positions_BT.astype(jnp.float32)[..., None] * jnp.asarray(inv_F, jnp.float32)[None, None]
  )
  emb_BTd = jnp.concatenate([freqs_BTF, freqs_BTF], axis=-1)
  return jnp.cos(emb_BTd) * scale, jnp.sin(emb_BTd) * scale


def apply_rope(x_BTNd: jax.Array, cos_BTd: jax.Array, sin_BTd: jax.Array) -> jax.Array:
  """x * cos + rotate_half(x) * sin, computed in fp32 and cast back to x's dtype."""
  x = x_BTNd.astype(jnp.float32)
  half = x.shape[-1] // 2
  rot = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  out = x * cos_BTd[:, :, None, :] + rot * sin_BTd[:, :, None, :]
  return out.astype(x_BTNd.dtype)
