"""TrainState and its creation, born sharded on the mesh: jit(init, out_shardings=...).

The params are the fp32 master copy (ModelConfig.param_dtype); the model casts them to its
compute dtype (ModelConfig.dtype, e.g. bfloat16) inside `apply`, so gradients and the
AdamW moments stay fp32.

With LoRA (TrainConfig.lora.rank > 0) `params` are the adapters (models.lora), the only
trainable part, and `frozen` the base weights; the reference policy is the base itself, so no
copy is kept. `model_params` gives what the forward applies (factorised adapters) and
`policy_params` the merged weights the engine loads at each weight sync.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from models import lora, transformer
from models.config import ModelConfig
from parallel import sharding
from parallel.rules import merge_rules
from rl.train_config import OptimConfig, TrainConfig


@flax.struct.dataclass
class TrainState:
  """step, fp32 trainable params, optimizer state, reference params (None: no KL or LoRA)
  and the frozen base weights (LoRA only)."""

  step: jax.Array
  params: Any
  opt_state: Any
  ref_params: Any = None
  frozen: Any = None


def model_params(params, frozen, cfg: TrainConfig):
  """The params the model applies: the base with factorised adapters under LoRA."""
  return lora.wrap(frozen, params, cfg.lora) if cfg.lora.enabled else params


def reference_params(state: TrainState, cfg: TrainConfig):
  """The KL reference: the stored copy, or the frozen base under LoRA (adapters off)."""
  return state.frozen if cfg.lora.enabled else state.ref_params


def policy_params(state: TrainState, cfg: TrainConfig):
  """Plain params for the engine and for export: base + merged adapters under LoRA."""
  if not cfg.lora.enabled:
    return state.params
  return _merge(state.frozen, state.params, cfg.lora)


_merge = jax.jit(lora.merge, static_argnums=2)  # one compile per LoraConfig, sharded in place


def trainable_axes(model_cfg: ModelConfig, cfg: TrainConfig):
  """Logical axes of TrainState.params: the model's, or the adapters' under LoRA."""
  if cfg.lora.enabled:
    return lora.adapter_axes(model_cfg, cfg.lora)
  return transformer.param_axes(model_cfg)


def lr_schedule(cfg: OptimConfig) -> optax.Schedule:
  """Linear warmup from 0 to lr, then cosine decay to lr * end_lr_ratio at decay_steps."""
  return optax.warmup_cosine_decay_schedule(
    init_value=0.0,
    peak_value=cfg.lr,
    warmup_steps=cfg.warmup_steps,
    decay_steps=max(cfg.decay_steps, cfg.warmup_steps + 1),
    end_value=cfg.lr * cfg.end_lr_ratio,
  )


def decay_mask(axes):
  """Weight decay only on matrices: params with >= 2 logical axes besides 'layers'.

  Norm scales and biases (vectors per layer) are not decayed, as is usual for transformers.
  """
  return jax.tree.map(
    lambda names: sum(a != "layers" for a in names) >= 2, axes, is_leaf=sharding.is_axes_leaf
  )


def make_optimizer(cfg: OptimConfig, axes=None) -> optax.GradientTransformation:
  """clip_by_global_norm -> adamw(warmup + cosine); `axes` (param_axes) picks what decays."""
  parts = [optax.clip_by_global_norm(cfg.max_grad_norm)] if cfg.max_grad_norm > 0 else []
  parts.append(
    optax.adamw(
      lr_schedule(cfg),
      b1=cfg.b1,
      b2=cfg.b2,
      eps=cfg.eps,
      weight_decay=cfg.weight_decay,
      mask=decay_mask(axes) if axes is not None else None,
    )
  )
  return optax.chain(*parts)


def state_shardings(model_cfg: ModelConfig, cfg: TrainConfig, mesh: Mesh, with_ref: bool):
  """The TrainState of NamedShardings (params by the rules table, optimizer alike)."""
  axes = trainable_axes(model_cfg, cfg)
  tx = make_optimizer(cfg.optim, axes)
  rules = merge_rules(overrides=cfg.rules)
  abs_base = jax.eval_shape(lambda: transformer.init(model_cfg, jax.random.key(0)))
  base_sh = sharding.param_shardings(transformer.param_axes(model_cfg), abs_base, mesh, rules)
  abs_params, p_sh, frozen_sh = abs_base, base_sh, None
  if cfg.lora.enabled:
    abs_params = jax.eval_shape(lambda: lora.init(model_cfg, cfg.lora, jax.random.key(0)))
    p_sh, frozen_sh = sharding.param_shardings(axes, abs_params, mesh, rules), base_sh
  o_sh = sharding.opt_state_shardings(tx, jax.eval_shape(tx.init, abs_params), p_sh, mesh)
  rep = sharding.replicated(mesh)
  ref_sh = base_sh if with_ref and not cfg.lora.enabled else None
  return TrainState(step=rep, params=p_sh, opt_state=o_sh, ref_params=ref_sh, frozen=frozen_sh)


@functools.lru_cache(maxsize=32)
def _jitted_init(model_cfg: ModelConfig, cfg: TrainConfig, mesh: Mesh):
  """One compiled initializer per (model, config, mesh), reused by later calls."""
  with_ref = cfg.loss.kl != "none"
  shardings = state_shardings(model_cfg, cfg, mesh, with_ref)
  tx = make_optimizer(cfg.optim, trainable_axes(model_cfg, cfg))

  def init(key, params):
    if params is None:
      params = transformer.init(model_cfg, key)
    if cfg.lora.enabled:
      adapters = lora.init(model_cfg, cfg.lora, jax.random.fold_in(key, 1))
      return TrainState(
        step=jnp.zeros((), jnp.int32), params=adapters, opt_state=tx.init(adapters), frozen=params
      )
    return TrainState(
      step=jnp.zeros((), jnp.int32),
      params=params,
      opt_state=tx.init(params),
      ref_params=params if with_ref else None,
    )

  return jax.jit(init, out_shardings=shardings), shardings


def create_train_state(model_cfg: ModelConfig, cfg: TrainConfig, mesh: Mesh, key, params=None):
  """A sharded TrainState, from `transformer.init(model_cfg, key)` or the given `params`.

  The reference params (a copy of the initial params) exist only when cfg.loss.kl != 'none'
  and LoRA is off; under LoRA `params` seed `frozen` and fresh adapters (B = 0) are trained.
  Returns (state, shardings) where shardings is a TrainState of NamedShardings.
  """
  init, shardings = _jitted_init(model_cfg, cfg, mesh)
  return init(key, params), shardings
