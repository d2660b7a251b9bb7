"""Hugging Face config.json <-> ModelConfig (field names of transformers v4 and v5).

Unsupported features (sliding windows, MLP biases, partial RoPE, dense layers inside a
Qwen3-MoE, other RoPE types) raise `CheckpointError` instead of loading a wrong model.
"""

from __future__ import annotations

from models.config import ModelConfig, RopeScaling


class CheckpointError(ValueError):
  """A checkpoint folder that cannot be loaded (names the file, tensor and shapes)."""


_ARCH_NAMES = {
  "llama": "LlamaForCausalLM",
  "qwen2": "Qwen2ForCausalLM",
  "qwen3": "Qwen3ForCausalLM",
  "qwen3_moe": "Qwen3MoeForCausalLM",
  "mixtral": "MixtralForCausalLM",
}


# ------------------------------------------------------------------ config.json


def _rope_from_hf(d: dict, file) -> tuple[float, RopeScaling]:
  rp = dict(d.get("rope_parameters") or d.get("rope_scaling") or {})
  default_theta = 1e6 if d.get("model_type") == "mixtral" else 10000.0
  theta = float(rp.get("rope_theta", d.get("rope_theta", default_theta)))
  kind = rp.get("rope_type", rp.get("type", "default"))
  if float(rp.get("partial_rotary_factor", d.get("partial_rotary_factor") or 1.0)) != 1.0:
    raise CheckpointError(f"{file}: partial_rotary_factor != 1 is not supported")
  if kind == "default":
    return theta, RopeScaling()
  if kind not in ("linear", "dynamic", "yarn", "llama3"):
    raise CheckpointError(
      f"{file}: rope type {kind!r} is not supported (none, linear, dynamic, yarn, llama3)"
    )
  orig = rp.get("original_max_position_embeddings", d.get("original_max_position_embeddings"))
  factor = rp.get("factor")
  if factor is None and kind == "yarn" and orig:
    factor = d["max_position_embeddings"] / orig
  kw = dict(
    kind=kind,
    factor=float(factor if factor is not None else 1.0),
    original_max_position_embeddings=orig,
  )
  for key in ("low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"):
    if rp.get(key) is not None:
      kw[key] = float(rp[key])
  for key in ("mscale", "mscale_all_dim", "attention_factor"):
    if rp.get(key) is not None:
      kw[key] = float(rp[key])
  if "truncate" in rp:
    kw["truncate"] = bool(rp["truncate"])
  return theta, RopeScaling(**kw)


def _check_supported(d: dict, arch: str, file) -> None:
  unsupported = [
    (d.get("hidden_act", "silu") not in ("silu", "swish"), "hidden_act must be silu"),
    (bool(d.get("mlp_bias")), "mlp_bias is not supported"),
    (bool(d.get("use_sliding_window")), "sliding-window attention is not supported"),
    (
      arch == "mixtral" and d.get("sliding_window") is not None,
      "sliding-window attention is not supported",
    ),
    (
      arch == "qwen3_moe" and (d.get("decoder_sparse_step", 1) != 1 or d.get("mlp_only_layers")),
      "Qwen3-MoE with dense layers (decoder_sparse_step/mlp_only_layers) is not supported",
    ),
  ]
  for bad, msg in unsupported:
    if bad:
      raise CheckpointError(f"{file}: {msg}")


def config_from_hf(d: dict, file="config.json", **overrides) -> ModelConfig:
  """Maps a HF config.json dict onto ModelConfig (overrides: dtype, remat, attention, ...)."""
  arch = d.get("model_type")
  if arch not in _ARCH_NAMES:
    raise CheckpointError(
      f"{file}: unknown architecture model_type={arch!r} "
      f"(architectures={d.get('architectures')}); supported: "
      f"{sorted(_ARCH_NAMES)}"
    )
  _check_supported(d, arch, file)
  try:
    theta, rs = _rope_from_hf(d, file)
    heads = int(d["num_attention_heads"])
    bias = bool(d.get("attention_bias", False))
    kw = dict(
      arch=arch,
      vocab_size=int(d["vocab_size"]),
      d_model=int(d["hidden_size"]),
      n_layers=int(d["num_hidden_layers"]),
      n_heads=heads,
      n_kv_heads=int(d.get("num_key_value_heads") or heads),
      head_dim=int(d.get("head_dim") or d["hidden_size"] // heads),
      d_ff=int(d.get("intermediate_size") or 0),
      max_seq_len=int(d["max_position_embeddings"]),
      rope_theta=theta,
      rope_scaling=rs,
      norm_eps=float(d.get("rms_norm_eps", 1e-6)),
      qk_norm=arch in ("qwen3", "qwen3_moe"),
      attn_bias=arch == "qwen2" or bias,
      attn_out_bias=arch != "qwen2" and bias,
      tie_embeddings=bool(d.get("tie_word_embeddings", False)),
    )
    if arch in ("qwen3_moe", "mixtral"):
      kw.update(
        n_experts=int(d.get("num_experts") or d["num_local_experts"]),
        n_experts_per_tok=int(d["num_experts_per_tok"]),
        moe_d_ff=int(d["moe_intermediate_size"] if arch == "qwen3_moe" else d["intermediate_size"]),
        norm_topk_prob=bool(d.get("norm_topk_prob", False)) if arch == "qwen3_moe" else True,
        router_aux_coef=float(d.get("router_aux_loss_coef", 0.001)),
      )
    return ModelConfig(**{**kw, **overrides})
  except KeyError as e:
    raise CheckpointError(f"{file}: missing field {e.args[0]!r}") from e
  except (TypeError, ValueError) as e:
    raise CheckpointError(f"{file}: {e}") from e


def config_to_hf(cfg: ModelConfig) -> dict:
  """The config.json that `transformers` (v4 and v5 field names) reads back as `cfg`."""
  if cfg.arch == "qwen2" and (not cfg.attn_bias or cfg.attn_out_bias):
    raise ValueError("qwen2 has q/k/v biases and no output bias")
  if cfg.arch != "qwen2" and cfg.attn_bias != cfg.attn_out_bias:
    raise ValueError(f"{cfg.arch}: attention_bias covers q/k/v and o together")
  if cfg.qk_norm != (cfg.arch in ("qwen3", "qwen3_moe")):
    raise ValueError(f"{cfg.arch}: qk_norm={cfg.qk_norm} cannot be expressed")
  if cfg.is_moe != (cfg.arch in ("qwen3_moe", "mixtral")):
    raise ValueError(f"{cfg.arch}: n_experts={cfg.n_experts} cannot be expressed")
  if cfg.arch == "mixtral" and not cfg.norm_topk_prob:
    raise ValueError("mixtral always renormalises the top-k gates (norm_topk_prob=True)")
  rs = cfg.rope_scaling
  rope = {"rope_type": "default" if rs.kind == "none" else rs.kind, "rope_theta": cfg.rope_theta}
  if rs.kind != "none":
    rope["factor"] = rs.factor
    if rs.original_max_position_embeddings is not None:
      rope["original_max_position_embeddings"] = rs.original_max_position_embeddings
  if rs.kind == "llama3":
    rope.update(low_freq_factor=rs.low_freq_factor, high_freq_factor=rs.high_freq_factor)
  if rs.kind == "yarn":
    rope.update(beta_fast=rs.beta_fast, beta_slow=rs.beta_slow, truncate=rs.truncate)
    for key in ("mscale", "mscale_all_dim", "attention_factor"):
      if getattr(rs, key) is not None:
        rope[key] = getattr(rs, key)
  d = dict(
    architectures=[_ARCH_NAMES[cfg.arch]],
    model_type=cfg.arch,
    vocab_size=cfg.vocab_size,
    hidden_size=cfg.d_model,
    intermediate_size=cfg.d_ff,
    num_hidden_layers=cfg.n_layers,
    num_attention_heads=cfg.n_heads,
    num_key_value_heads=cfg.n_kv_heads,
    head_dim=cfg.head_dim,
    max_position_embeddings=cfg.max_seq_len,
    rms_norm_eps=cfg.norm_eps,
    hidden_act="silu",
    tie_word_embeddings=cfg.tie_embeddings,
    rope_theta=cfg.rope_theta,
    rope_parameters=rope,
    rope_scaling=None if rs.kind == "none" else rope,
    torch_dtype=cfg.param_dtype,
    use_sliding_window=False,
    sliding_window=None,
  )
  if cfg.arch != "qwen2":
    d["attention_bias"] = cfg.attn_bias
  if cfg.is_moe:
    d.update(num_experts_per_tok=cfg.n_experts_per_tok, router_aux_loss_coef=cfg.router_aux_coef)
    if cfg.arch == "qwen3_moe":
      d.update(
        num_experts=cfg.n_experts,
        moe_intermediate_size=cfg.moe_d_ff,
        norm_topk_prob=cfg.norm_topk_prob,
        decoder_sparse_step=1,
        mlp_only_layers=[],
      )
    else:
      d.update(num_local_experts=cfg.n_experts, intermediate_size=cfg.moe_d_ff)
  return d
