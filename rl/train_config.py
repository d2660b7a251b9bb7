"""The configs of the update step: loss, optimizer, mesh, micro-batching (frozen, hashable).

The pure core reads only these (rl.losses, rl.train_step, rl.layout, rl.train_state,
rl.batch): this module imports the policy's and the mesh's configs and nothing of envs/ or
the engine. The whole run's config (`rl.config.Experiment`) holds a TrainConfig as `train`.
The sampling temperature is not here: its one owner is `agent.temperature`, which the host
passes to the step (`make_train_step(..., temperature=)`), so rollout and loss cannot disagree.
"""

from __future__ import annotations

import dataclasses

from models.lora import LoraConfig
from parallel.mesh import MeshConfig


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """What the GRPO-family loss computes. Every name below is looked up in rl.registry."""

  advantage: str = "grpo"  # grpo | dr_grpo | rloo | batch_std
  adv_eps: float = 1e-6  # added to the std in the denominator
  policy_loss: str = "ppo"  # ppo | gspo | cispo
  clip_low: float = 0.2  # ratio clipped to [1 - clip_low, 1 + clip_high]
  clip_high: float = 0.28  # clip-higher (DAPO); set 0.2 for symmetric PPO
  dual_clip: float | None = None  # c (e.g. 3.0): bounds the loss at -c*A where A < 0
  log_ratio_clamp: float = 20.0  # log-ratios clamped to +-this before exp
  kl: str = "none"  # none | k1 | k2 | k3 (none: no reference forward at all)
  kl_coef: float = 0.0
  kl_clamp: float = 10.0  # k3 values clamped to [-kl_clamp, kl_clamp]
  aggregation: str = "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum
  #                                  | seq-mean-token-sum-norm
  norm_length: int = 0  # constant length for seq-mean-token-sum-norm; 0 = row length T
  entropy_coef: float = 0.0  # entropy bonus (loss -= coef * entropy)
  compute_entropy: bool = True  # entropy metric (needs a pass over the logits)
  # Decoupled PPO (AReaL): ratio against the proximal policy, weighted by prox/behaviour.
  decoupled: bool = False
  is_level: str = "token"  # token | sequence (geometric mean over the sequence's tokens)
  is_mode: str = "truncate"  # truncate: w = min(w, cap) | mask: w = 0 where w > cap
  is_cap: float = 2.0
  # Overlong responses: none | penalty (DAPO soft length penalty) | mask (truncated ones).
  overlong: str = "none"
  overlong_max_len: int = 0  # L_max, in policy (loss-mask) tokens
  overlong_buffer: int = 0  # L_cache: penalty ramps over the last this-many tokens
  overlong_penalty: float = 1.0  # penalty at L_max
  # Scale of negative advantages (1: the estimator's own). Below 1 the update leans on the
  # successes: with Adam, the large gradients of a failed sample's improbable tokens otherwise
  # set the step size, and a nearly-solved problem (a sharp warm start) barely moves.
  negative_advantage_weight: float = 1.0

  def __post_init__(self):
    choices = {
      "is_level": ("token", "sequence"),
      "is_mode": ("truncate", "mask"),
      "overlong": ("none", "penalty", "mask"),
    }
    for field, ok in choices.items():
      if getattr(self, field) not in ok:
        raise ValueError(f"LossConfig.{field}: {getattr(self, field)!r} is not one of {ok}")
    if self.overlong == "penalty" and not 0 < self.overlong_buffer <= self.overlong_max_len:
      raise ValueError(
        "LossConfig.overlong='penalty' needs 0 < overlong_buffer <= overlong_max_len, got "
        f"{self.overlong_buffer} and {self.overlong_max_len}"
      )
    if not 0.0 <= self.negative_advantage_weight <= 1.0:
      raise ValueError(
        "LossConfig.negative_advantage_weight must be in [0, 1], got "
        f"{self.negative_advantage_weight}"
      )
    if self.dual_clip is not None and self.dual_clip <= 1.0:
      raise ValueError(f"LossConfig.dual_clip must be > 1 (e.g. 3.0), got {self.dual_clip}")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """optax chain: clip_by_global_norm -> adamw with linear warmup + cosine decay."""

  lr: float = 1e-6
  warmup_steps: int = 0
  decay_steps: int = 1000  # total steps of the schedule (warmup included)
  end_lr_ratio: float = 0.1  # final lr = lr * end_lr_ratio
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  weight_decay: float = 0.0
  max_grad_norm: float = 1.0  # 0 disables clipping


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """The update step: loss, optimizer, mesh, rule overrides and micro-batching."""

  loss: LossConfig = LossConfig()
  optim: OptimConfig = OptimConfig()
  mesh: MeshConfig = MeshConfig()
  rules: tuple = ()  # overrides of parallel.rules.DEFAULT_RULES, e.g. ("vocab=",)
  micro_batches: int = 1  # gradient accumulation steps per update (rows split evenly)
  logit_buckets: int = 4  # LM head only at loss tokens, in <= this many static lengths; 0: all
  share_prefixes: bool = True  # rows of a group sharing a prompt run it once (rl/layout.py)
  lora: LoraConfig = LoraConfig()  # rank > 0: train adapters only, the base stays frozen
