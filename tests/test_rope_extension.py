"""RoPE scaling used to extend a model's context: trained for 128 tokens, run at 512.

Tests the functions of `models.rope` through the model as a user would extend it: the
cos/sin tables at every position of the longer context against each scaling's formula
(written out per frequency in float64 here), the exact position-interpolation identity of
linear scaling, and the logits of the extended model (finite, causal-prefix consistent,
and the same with ring attention over 8 devices).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import rope, transformer
from models.config import RopeScaling, tiny
from parallel import ring_attention as ra
from parallel import zigzag as zz
from parallel.mesh import MeshConfig, make_mesh

TRAIN_LEN, RUN_LEN, FACTOR = 128, 512, 4.0
THETA, HEAD_DIM = 10000.0, 16
TOL = dict(rtol=1e-5, atol=1e-5)  # fp32 logits of O(0.1)

SCALINGS = {
  "none": RopeScaling(),
  "linear": RopeScaling("linear", factor=FACTOR),
  "dynamic": RopeScaling("dynamic", factor=FACTOR),
  "llama3": RopeScaling(
    "llama3",
    factor=FACTOR,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=TRAIN_LEN,
  ),  # fmt: skip
  "yarn": RopeScaling("yarn", factor=FACTOR, original_max_position_embeddings=TRAIN_LEN),
}


def _cfg(kind: str, **kw):
  return tiny(
    "llama", vocab_size=64, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
    head_dim=HEAD_DIM, d_ff=64, max_seq_len=TRAIN_LEN, rope_theta=THETA,
    rope_scaling=SCALINGS[kind], **kw,
  )  # fmt: skip


def _expected_freqs(kind: str, seq_len: int) -> tuple[np.ndarray, float]:
  """Inverse frequencies and attention factor from the published formulas (float64)."""
  d, f = HEAD_DIM, FACTOR
  j = np.arange(d // 2)
  inv = THETA ** (-2.0 * j / d)
  if kind == "linear":  # position interpolation (Chen et al. 2023)
    return inv / f, 1.0
  if kind == "dynamic":  # NTK-aware base, recomputed from the longest sequence seen
    length = max(seq_len, TRAIN_LEN)
    base = THETA * (f * length / TRAIN_LEN - (f - 1)) ** (d / (d - 2))
    return base ** (-2.0 * j / d), 1.0
  if kind == "llama3":  # keep short wavelengths, divide long ones by f, blend in between
    wav = 2 * math.pi / inv
    smooth = (TRAIN_LEN / wav - 1.0) / (4.0 - 1.0)
    blended = (1 - smooth) * inv / f + smooth * inv
    return np.where(wav < TRAIN_LEN / 4.0, inv, np.where(wav > TRAIN_LEN, inv / f, blended)), 1.0
  if kind == "yarn":  # NTK-by-parts ramp between beta_fast=32 and beta_slow=1 rotations
    dim_for = lambda rot: d * math.log(TRAIN_LEN / (rot * 2 * math.pi)) / (2 * math.log(THETA))
    lo, hi = max(math.floor(dim_for(32.0)), 0), min(math.ceil(dim_for(1.0)), d - 1)
    ramp = np.clip((j - lo) / (hi - lo), 0.0, 1.0)  # 0: keep, 1: interpolate
    return inv * (1 - ramp) + inv / f * ramp, 0.1 * math.log(f) + 1.0
  return inv, 1.0


@pytest.mark.parametrize("kind", list(SCALINGS))
def test_rope_tables_at_extended_positions_match_formula(kind):
  cfg = _cfg(kind)
  pos = np.arange(RUN_LEN, dtype=np.int32)[None]
  cos, sin = (np.asarray(a)[0] for a in jax.jit(rope.cos_sin, static_argnums=1)(pos, cfg))
  inv, att = _expected_freqs(kind, RUN_LEN)
  angle = pos[0, :, None].astype(np.float64) * np.concatenate([inv, inv])[None]
  # fp32 rounds the angle p * inv_freq: |error| <= about 4 ulp of RUN_LEN radians.
  atol = 4 * RUN_LEN * np.finfo(np.float32).eps
  np.testing.assert_allclose(cos, att * np.cos(angle), rtol=0, atol=atol)
  np.testing.assert_allclose(sin, att * np.sin(angle), rtol=0, atol=atol)
  if kind in ("llama3", "yarn"):  # both regimes occur: kept and interpolated frequencies
    ratio = inv / _expected_freqs("none", RUN_LEN)[0]
    assert ratio.max() == pytest.approx(1.0) and ratio.min() == pytest.approx(1 / FACTOR)


def test_linear_scaling_is_exact_position_interpolation():
  """Position 4p of the extended model rotates exactly like position p of the original."""
  p = np.arange(TRAIN_LEN, dtype=np.int32)[None]
  ext = rope.cos_sin(jnp.asarray(p * int(FACTOR)), _cfg("linear"))
  base = rope.cos_sin(jnp.asarray(p), _cfg("none"))
  for a, b in zip(ext, base, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _logits(cfg, params, tokens):
  return np.asarray(jax.jit(transformer.apply, static_argnums=2)(params, tokens, cfg))


@pytest.mark.parametrize("kind", ["linear", "dynamic", "llama3", "yarn"])
def test_extended_model_logits(kind):
  cfg = _cfg(kind)
  params = transformer.init(cfg, jax.random.key(0))
  tokens = np.random.default_rng(0).integers(0, 64, (2, RUN_LEN)).astype(np.int32)
  long = _logits(cfg, params, tokens)
  assert long.shape == (2, RUN_LEN, 64) and np.all(np.isfinite(long))
  short = _logits(cfg, params, tokens[:, :TRAIN_LEN])
  if kind == "dynamic":
    # Up to the trained length dynamic NTK is plain RoPE; past it, the base grows with the
    # longest sequence, so the same prefix is rotated differently (as in Hugging Face).
    plain = _logits(_cfg("none"), params, tokens[:, :TRAIN_LEN])
    np.testing.assert_allclose(short, plain, **TOL)  # fp32: its frequencies take another path
    assert np.max(np.abs(long[:, :TRAIN_LEN] - short)) > 1e-4
  else:
    np.testing.assert_allclose(long[:, :TRAIN_LEN], short, **TOL)


def test_extended_model_with_ring_attention_matches_apply():
  """YaRN-extended model at 4x its context, sequence split over 8 devices (zig-zag)."""
  cfg = _cfg("yarn")
  params = transformer.init(cfg, jax.random.key(1))
  mesh, n = make_mesh(MeshConfig(sequence=8, fsdp=1)), 8
  tokens = np.random.default_rng(1).integers(0, 64, (1, RUN_LEN)).astype(np.int32)
  pos_z = zz.to_zigzag(np.arange(RUN_LEN, dtype=np.int32)[None], n)

  @jax.jit
  def ring_logits(params, tokens_z):
    lp = jax.tree.map(lambda a: a[0], params["layers"])  # the one layer
    x = transformer.embed(params, tokens_z, cfg)
    q, k, v = transformer.layer_qkv(lp, x, pos_z, cfg)
    x, _ = transformer.layer_finish(lp, x, ra.ring_attention(q, k, v, mesh=mesh, chunk=16), cfg)
    return transformer.unembed(params, x, cfg)

  got = zz.from_zigzag(np.asarray(ring_logits(params, zz.to_zigzag(tokens, n))), n)
  np.testing.assert_allclose(got, _logits(cfg, params, tokens), **TOL)
