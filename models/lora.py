"""LoRA: low-rank adapters over the stacked layer weights, as pure functions of pytrees.

A targeted weight W [L, *in, *out] gets A [L, *in, r] and B [L, r, *out]; the adapted
weight is W + scale * A @ B with scale = alpha / r (alpha / sqrt(r) with rslora), as in
PEFT. B starts at zero, so an adapted model starts equal to its base. Adapters carry
logical axes (the weight's own in/out axes plus 'lora_rank'), so the one rules table in
parallel/ shards them like the weights they adapt.

Two ways to run an adapted model, equal up to rounding:
  merge(params, adapters, cfg)  plain params W + scale * A @ B (for the engine, export)
  wrap(params, adapters, cfg)   layers.LoraWeight leaves that `dense` applies factorised,
                                x @ W + scale * (x @ A) @ B: no weight-sized gradient, so
                                the update step differentiates through this one.

Targets name layer weights: ours (wq, wk, wv, wo, w_gate, w_up, w_down), PEFT's module
names (q_proj ... down_proj), 'all-linear', or 'axis:NAME' for every layer matrix with
logical axis NAME (axis:heads -> wq, wo; axis:kv_heads -> wk, wv; axis:mlp -> the MLP).

Legend: L layers, D d_model, H heads, K kv heads, d head_dim, F d_ff, r rank.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import optax

from models import transformer
from models.config import ModelConfig
from models.layers import LoraWeight

# PEFT module name -> our layer leaf (dense models).
PEFT_NAMES = {
  "q_proj": "wq",
  "k_proj": "wk",
  "v_proj": "wv",
  "o_proj": "wo",
  "gate_proj": "w_gate",
  "up_proj": "w_up",
  "down_proj": "w_down",
}
ALL_LINEAR = tuple(PEFT_NAMES.values())
RANK_AXIS = "lora_rank"


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """rank 0 turns LoRA off (full fine-tuning)."""

  rank: int = 0
  alpha: float = 16.0
  targets: tuple[str, ...] = ALL_LINEAR
  rslora: bool = False  # scale alpha / sqrt(rank) instead of alpha / rank

  def __post_init__(self):
    if self.rank < 0:
      raise ValueError(f"LoraConfig.rank must be >= 0 (0 = off), got {self.rank}")
    if self.rank and not self.targets:
      raise ValueError("LoraConfig.targets is empty: name at least one weight (e.g. 'wq')")

  @property
  def enabled(self) -> bool:
    return self.rank > 0

  @property
  def scale(self) -> float:
    return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)


def resolve_targets(model_cfg: ModelConfig, targets) -> tuple[str, ...]:
  """Target specs -> our layer leaf names (sorted, unique); raises on an unknown name."""
  layer_axes = transformer.param_axes(model_cfg)["layers"]
  linear = [k for k in ALL_LINEAR if k in layer_axes]
  out: set[str] = set()
  for spec in targets:
    if spec == "all-linear":
      out.update(linear)
    elif spec.startswith("axis:"):
      hits = [k for k in linear if spec[5:] in layer_axes[k]]
      if not hits:
        raise ValueError(f"LoRA target {spec!r}: no layer matrix has logical axis {spec[5:]!r}")
      out.update(hits)
    elif PEFT_NAMES.get(spec, spec) in linear:
      out.add(PEFT_NAMES.get(spec, spec))
    else:
      raise ValueError(
        f"LoRA target {spec!r}: not a dense layer matrix of this {model_cfg.arch} model; "
        f"known: {linear + list(PEFT_NAMES)} , 'all-linear', 'axis:NAME'"
      )
  return tuple(sorted(out))


def n_in_axes(axes: tuple[str, ...]) -> int:
  """How many leading axes (after 'layers') are inputs: 1 from the residual, else all but one."""
  return 1 if axes[0] == "embed" else len(axes) - 1


def _split(model_cfg: ModelConfig, leaf: str):
  """(in shape, out shape, in axes, out axes) of a layer weight without the layer axis."""
  shape = transformer.param_shapes(model_cfg)["layers"][leaf][1:]
  axes = transformer.param_axes(model_cfg)["layers"][leaf][1:]
  n = n_in_axes(axes)
  return shape[:n], shape[n:], axes[:n], axes[n:]


def adapter_axes(model_cfg: ModelConfig, cfg: LoraConfig):
  """Logical axes of the adapters: {leaf: {'a': (layers, *in, lora_rank), 'b': ...}}."""
  out = {}
  for leaf in resolve_targets(model_cfg, cfg.targets):
    _, _, in_ax, out_ax = _split(model_cfg, leaf)
    out[leaf] = {"a": ("layers", *in_ax, RANK_AXIS), "b": ("layers", RANK_AXIS, *out_ax)}
  return out


def adapter_shapes(model_cfg: ModelConfig, cfg: LoraConfig):
  out = {}
  for leaf in resolve_targets(model_cfg, cfg.targets):
    in_sh, out_sh, _, _ = _split(model_cfg, leaf)
    L, r = model_cfg.n_layers, cfg.rank
    out[leaf] = {"a": (L, *in_sh, r), "b": (L, r, *out_sh)}
  return out


def init(model_cfg: ModelConfig, cfg: LoraConfig, key: jax.Array):
  """A ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PEFT's kaiming-uniform, a=sqrt(5)), B = 0, fp32.

  Pure; wrap in jax.jit(..., out_shardings=...) to create the adapters already sharded.
  """
  out = {}
  shapes = adapter_shapes(model_cfg, cfg)
  for i, (leaf, sh) in enumerate(sorted(shapes.items())):
    fan_in = math.prod(sh["a"][1:-1])
    bound = 1.0 / math.sqrt(fan_in)
    a = jax.random.uniform(jax.random.fold_in(key, i), sh["a"], jnp.float32, -bound, bound)
    out[leaf] = {"a": a, "b": jnp.zeros(sh["b"], jnp.float32)}
  return out


def delta(a, b):
  """a [L, *in, r] @ b [L, r, *out] -> [L, *in, *out] in fp32 (the unscaled rank-r update)."""
  L, r = a.shape[0], a.shape[-1]
  in_sh, out_sh = a.shape[1:-1], b.shape[2:]
  a2 = a.astype(jnp.float32).reshape(L, -1, r)
  b2 = b.astype(jnp.float32).reshape(L, r, -1)
  return jnp.einsum("lir,lro->lio", a2, b2).reshape(L, *in_sh, *out_sh)


def merge(params, adapters, cfg: LoraConfig):
  """params with every adapted weight replaced by W + scale * A @ B (in W's dtype)."""
  layers = dict(params["layers"])
  for leaf, ab in adapters.items():
    w = layers[leaf]
    d = delta(ab["a"], ab["b"])
    layers[leaf] = (w.astype(jnp.float32) + cfg.scale * d).astype(w.dtype)
  return {**params, "layers": layers}


def wrap(params, adapters, cfg: LoraConfig):
  """params with every adapted weight a layers.LoraWeight (factorised forward in `dense`)."""
  layers = dict(params["layers"])
  for leaf, ab in adapters.items():
    layers[leaf] = LoraWeight(w=layers[leaf], a=ab["a"], b=ab["b"], scale=cfg.scale)
  return {**params, "layers": layers}


def apply(params, adapters, tokens_BT, model_cfg: ModelConfig, cfg: LoraConfig, **kw):
  """transformer.apply of the adapted model, factorised (no merged weight is formed)."""
  return transformer.apply(wrap(params, adapters, cfg), tokens_BT, model_cfg, **kw)


# ------------------------------------------------------------------ training


def trainable_labels(tree):
  """'adapter' for leaves under a {'lora': ...} key of tree, 'frozen' for the rest."""
  return {
    k: jax.tree.map(lambda _, k=k: "adapter" if k == "lora" else "frozen", v)
    for k, v in tree.items()
  }


def freeze_base(tx: optax.GradientTransformation) -> optax.GradientTransformation:
  """tx on the 'lora' part of {'base': params, 'lora': adapters}; the base gets zero updates
  and no optimizer state (optax.set_to_zero keeps none)."""
  return optax.multi_transform({"adapter": tx, "frozen": optax.set_to_zero()}, trainable_labels)
