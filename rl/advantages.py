"""Advantage estimators over sequences grouped by prompt, chosen by name (rl.registry).

Legend: N sequences (flattened batch slots). `from_rewards` is the one path from rewards to the
advantages a LossConfig asks for (overlong penalty, estimator, negative-advantage weight); the
host (rl.batch) and the step (rl.train_step, for a batch carrying rewards_BS) both call it.
Every estimator takes
`(rewards_N, group_ids_N, valid_N, eps)` and returns `advantages_N`; invalid slots (padding)
take no part in any statistic and get 0, and so does every member of a group of one.
Group statistics use an N x N same-group mask with elementwise sums (no matmul, so TPU's
default bf16 matmul precision cannot round them); N is the number of sequences in one
update, at most a few thousand.
"""

from __future__ import annotations

import jax.numpy as jnp

from rl.registry import ADVANTAGES
from rl.train_config import LossConfig


def _group_stats(rewards_N, group_ids_N, valid_N):
  """Per sequence: its group's size, reward sum, mean and unbiased (ddof=1) std."""
  valid_N = valid_N.astype(bool)
  r_N = jnp.where(valid_N, rewards_N.astype(jnp.float32), 0.0)
  same_NN = (group_ids_N[:, None] == group_ids_N[None, :]) & valid_N[:, None] & valid_N[None, :]
  count_N = same_NN.sum(axis=1).astype(jnp.float32)
  sum_N = jnp.where(same_NN, r_N[None, :], 0.0).sum(axis=1)
  mean_N = sum_N / jnp.maximum(count_N, 1.0)
  sq_N = jnp.where(same_NN, jnp.square(r_N[None, :] - mean_N[:, None]), 0.0).sum(axis=1)
  std_N = jnp.sqrt(sq_N / jnp.maximum(count_N - 1.0, 1.0))
  return r_N, count_N, sum_N, mean_N, std_N, valid_N & (count_N > 1)


@ADVANTAGES.register("grpo")
def grpo(rewards_N, group_ids_N, valid_N, eps=1e-6):
  """(r - group mean) / (group std + eps), std with ddof=1 as TRL and verl."""
  r_N, _, _, mean_N, std_N, ok_N = _group_stats(rewards_N, group_ids_N, valid_N)
  return jnp.where(ok_N, (r_N - mean_N) / (std_N + eps), 0.0)


@ADVANTAGES.register("dr_grpo")
def dr_grpo(rewards_N, group_ids_N, valid_N, eps=1e-6):
  """Dr. GRPO: r - group mean, no std division (eps unused)."""
  del eps
  r_N, _, _, mean_N, _, ok_N = _group_stats(rewards_N, group_ids_N, valid_N)
  return jnp.where(ok_N, r_N - mean_N, 0.0)


@ADVANTAGES.register("rloo")
def rloo(rewards_N, group_ids_N, valid_N, eps=1e-6):
  """RLOO: r minus the mean reward of the other members of the group."""
  del eps
  r_N, count_N, sum_N, _, _, ok_N = _group_stats(rewards_N, group_ids_N, valid_N)
  return jnp.where(ok_N, r_N - (sum_N - r_N) / jnp.maximum(count_N - 1.0, 1.0), 0.0)


@ADVANTAGES.register("batch_std")
def batch_std(rewards_N, group_ids_N, valid_N, eps=1e-6):
  """(r - group mean) / (std of the rewards over the whole batch + eps) (Lite PPO)."""
  r_N, _, _, mean_N, _, ok_N = _group_stats(rewards_N, group_ids_N, valid_N)
  v_N = valid_N.astype(bool)
  n = jnp.maximum(v_N.sum().astype(jnp.float32), 1.0)
  batch_mean = r_N.sum() / n
  batch_var = jnp.where(v_N, jnp.square(r_N - batch_mean), 0.0).sum() / jnp.maximum(n - 1.0, 1.0)
  return jnp.where(ok_N, (r_N - mean_N) / (jnp.sqrt(batch_var) + eps), 0.0)


def overlong_penalty(length_N, max_len: int, buffer: int, penalty: float = 1.0):
  """DAPO soft length penalty, added to the reward.

  0 up to max_len - buffer tokens, then falls linearly to -penalty at max_len, and is
  -penalty beyond it.
  """
  excess_N = length_N.astype(jnp.float32) - (max_len - buffer)
  return -penalty * jnp.clip(excess_N / buffer, 0.0, 1.0)


def compute_advantages(name: str, rewards_N, group_ids_N, valid_N, eps=1e-6):
  """Looks `name` up in the registry and applies it."""
  return ADVANTAGES.get(name)(rewards_N, group_ids_N, valid_N, eps)


def from_rewards(cfg: LossConfig, rewards_N, group_ids_N, valid_N, length_N):
  """(shaped rewards_N, advantages_N) as `cfg` asks: the DAPO overlong penalty (by policy
  tokens `length_N`) added to the rewards, the registered estimator over the groups, then the
  negative advantages scaled by `cfg.negative_advantage_weight`."""
  r_N = jnp.asarray(rewards_N, jnp.float32)
  if cfg.overlong == "penalty":
    pen_N = overlong_penalty(jnp.asarray(length_N), cfg.overlong_max_len, cfg.overlong_buffer)
    r_N = r_N + cfg.overlong_penalty * pen_N
  adv_N = compute_advantages(cfg.advantage, r_N, group_ids_N, valid_N, cfg.adv_eps)
  w = cfg.negative_advantage_weight
  return r_N, jnp.where(adv_N < 0, adv_N * w, adv_N) if w != 1.0 else adv_N
