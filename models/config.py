"""Model configuration: frozen, hashable dataclasses (usable as static jit arguments).

Field names follow the usual decoder-only vocabulary; `models.io.hf` maps Hugging Face
config.json fields onto them. Presets at the bottom give tiny test models and the ~20M
parameter Qwen3-shaped model used by the benchmark and the demos.
"""

from __future__ import annotations

import dataclasses

ARCHS = ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral")
ROPE_KINDS = ("none", "linear", "dynamic", "yarn", "llama3")
DTYPES = ("float32", "bfloat16")
REMATS = ("none", "full", "save_dots")
# "ring": sequence-parallel ring attention over the mesh's `sequence` axis when the active mesh
# has sequence > 1 (parallel/ring_attention.py); chunked attention otherwise and when decoding.
ATTENTIONS = ("chunked", "naive", "ring")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """RoPE frequency scaling with Hugging Face `ROPE_INIT_FUNCTIONS` semantics.

  kind: 'none' (plain RoPE), 'linear', 'dynamic' (NTK, grows with the longest position
  seen), 'yarn' or 'llama3'. `original_max_position_embeddings` is the pre-training
  context (llama3, yarn; defaults to the model's max_seq_len as in HF).
  """

  kind: str = "none"
  factor: float = 1.0
  original_max_position_embeddings: int | None = None
  low_freq_factor: float = 1.0  # llama3
  high_freq_factor: float = 4.0  # llama3
  beta_fast: float = 32.0  # yarn
  beta_slow: float = 1.0  # yarn
  mscale: float | None = None  # yarn (DeepSeek style attention factor)
  mscale_all_dim: float | None = None  # yarn
  attention_factor: float | None = None  # yarn; None = inferred from factor as in HF
  truncate: bool = True  # yarn: round the correction range to whole dims

  def __post_init__(self):
    if self.kind not in ROPE_KINDS:
      raise ValueError(f"rope scaling kind {self.kind!r} not in {ROPE_KINDS}")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """A decoder-only transformer (dense or mixture-of-experts)."""

  arch: str = "qwen3"
  vocab_size: int = 256
  d_model: int = 64
  n_layers: int = 2
  n_heads: int = 4
  n_kv_heads: int = 2
  head_dim: int = 16
  d_ff: int = 128
  max_seq_len: int = 2048
  rope_theta: float = 10000.0
  rope_scaling: RopeScaling = RopeScaling()
  norm_eps: float = 1e-6
  qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k before RoPE
  attn_bias: bool = False  # biases on q/k/v projections (Qwen2)
  attn_out_bias: bool = False  # bias on the output projection (Llama attention_bias=True)
  tie_embeddings: bool = False
  # Mixture of experts (n_experts == 0 means a dense SwiGLU MLP).
  n_experts: int = 0
  n_experts_per_tok: int = 2
  moe_d_ff: int = 0
  norm_topk_prob: bool = True
  router_aux_coef: float = 0.0
  # Numerics and memory.
  dtype: str = "float32"  # compute dtype
  param_dtype: str = "float32"
  remat: str = "none"
  # Layers per iteration of the training forward's layer scan (>= n_layers: unrolled). More
  # means fewer per-layer stack copies but compile time growing with depth.
  scan_unroll: int = 1
  attention: str = "chunked"  # chunked | naive | ring (see ATTENTIONS)
  attn_chunk: int = 128  # query and key chunk of the chunked / ring attention (CPU sweet spot)

  def __post_init__(self):
    checks = (
      (self.arch in ARCHS, f"arch {self.arch!r} not in {ARCHS}"),
      (self.dtype in DTYPES, f"dtype {self.dtype!r} not in {DTYPES}"),
      (self.param_dtype in DTYPES, f"param_dtype {self.param_dtype!r} not in {DTYPES}"),
      (self.remat in REMATS, f"remat {self.remat!r} not in {REMATS}"),
      (self.attention in ATTENTIONS, f"attention {self.attention!r} not in {ATTENTIONS}"),
      (self.n_heads % self.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads"),
      (self.head_dim % 2 == 0, "head_dim must be even for RoPE"),
      (self.attn_chunk > 0, "attn_chunk must be positive"),
      (self.scan_unroll >= 1, "scan_unroll must be >= 1"),
      (not self.is_moe or 0 < self.n_experts_per_tok <= self.n_experts, "bad top-k"),
      (not self.is_moe or self.moe_d_ff > 0, "MoE needs moe_d_ff > 0"),
    )
    for ok, msg in checks:
      if not ok:
        raise ValueError(f"ModelConfig: {msg}")

  @property
  def is_moe(self) -> bool:
    return self.n_experts > 0

  def replace(self, **kw) -> ModelConfig:
    return dataclasses.replace(self, **kw)


def num_params(cfg: ModelConfig) -> int:
  """Parameter count (embedding counted once when tied)."""
  d, h, k, hd = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
  attn = d * hd * (2 * h + 2 * k) + 2 * d
  if cfg.attn_bias:
    attn += hd * (h + 2 * k)
  if cfg.attn_out_bias:
    attn += d
  if cfg.qk_norm:
    attn += 2 * hd
  if cfg.is_moe:
    mlp = d * cfg.n_experts + 3 * cfg.n_experts * d * cfg.moe_d_ff
  else:
    mlp = 3 * d * cfg.d_ff
  emb = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
  return cfg.n_layers * (attn + mlp) + emb + d


# ---------------------------------------------------------------------------- presets


def tiny(arch: str = "qwen3", **kw) -> ModelConfig:
  """A tiny model of the given family for tests (vocab 256, width 64, 2 layers)."""
  fam = {
    "llama": dict(rope_theta=500000.0, norm_eps=1e-5),
    "qwen2": dict(attn_bias=True, tie_embeddings=True, rope_theta=1e6),
    "qwen3": dict(qk_norm=True, tie_embeddings=True, rope_theta=1e6),
    "qwen3_moe": dict(
      qk_norm=True,
      n_experts=4,
      n_experts_per_tok=2,
      moe_d_ff=32,
      norm_topk_prob=True,
      router_aux_coef=0.001,
      rope_theta=1e6,
    ),
    "mixtral": dict(
      n_experts=4,
      n_experts_per_tok=2,
      moe_d_ff=64,
      norm_topk_prob=True,
      router_aux_coef=0.02,
      rope_theta=1e6,
      norm_eps=1e-5,
    ),
  }[arch]
  return ModelConfig(arch=arch, **{**fam, **kw})


def qwen3_20m(**kw) -> ModelConfig:
  """Qwen3-shaped model with about 20M parameters (tied embeddings)."""
  base = dict(
    arch="qwen3",
    vocab_size=8192,
    d_model=512,
    n_layers=5,
    n_heads=8,
    n_kv_heads=2,
    head_dim=64,
    d_ff=1792,
    max_seq_len=2048,
    rope_theta=1e6,
    qk_norm=True,
    tie_embeddings=True,
  )
  return ModelConfig(**{**base, **kw})
