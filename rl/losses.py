"""GRPO-family policy losses, KL estimators and loss aggregation, chosen by name.

Legend: B rows, T tokens per row, V vocab, S sequence slots per row (packing), N positions picked
in each row.
Alignment: `logp_BT[b, t]` is log p(tokens[b, t] | tokens[b, :t]) from the logits at t-1;
column 0 has no prediction and is 0. Every per-token array below uses this alignment.
Segments: `segment_ids_BT` is 1..S for the sequences packed into a row, 0 for padding.

Aggregations divide by denominators of the *whole* update batch (`Denoms`), so summing
the losses of micro-batches gives exactly the loss of one big batch.

KL sign convention: delta = log pi_ref - log pi (per sampled token, drawn from pi), so
r = pi_ref / pi = exp(delta), and the estimators of KL(pi || pi_ref) are
k1 = -delta, k2 = delta^2 / 2, k3 = exp(delta) - 1 - delta (>= 0, low variance; clamped to
+-kl_clamp). delta is clamped to +-log_ratio_clamp before exp.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rl.registry import AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES
from rl.train_config import LossConfig

_HI = jax.lax.Precision.HIGHEST


class Denoms(NamedTuple):
  """Loss denominators over the whole update batch (not one micro-batch)."""

  n_tokens: jax.Array  # loss-mask tokens (before any importance-weight masking)
  n_seqs: jax.Array  # sequences with at least one loss token
  norm_length: jax.Array  # constant length of seq-mean-token-sum-norm
  aux_weight: jax.Array | float = 1.0  # share of the MoE aux loss per micro-batch (1/M)


class Segments(NamedTuple):
  """Per-sequence views of per-token arrays for rows that pack S sequences."""

  onehot_BTS: jax.Array  # float, token t belongs to sequence slot s
  index_BT: jax.Array  # slot of each token (padding -> slot 0, masked out anyway)

  @classmethod
  def make(cls, segment_ids_BT, n_slots: int) -> Segments:
    ids_S = jnp.arange(1, n_slots + 1, dtype=segment_ids_BT.dtype)
    onehot_BTS = (segment_ids_BT[..., None] == ids_S[None, None, :]).astype(jnp.float32)
    return cls(onehot_BTS, jnp.clip(segment_ids_BT - 1, 0, n_slots - 1))

  def sum(self, x_BT):
    return jnp.einsum("bt,bts->bs", x_BT.astype(jnp.float32), self.onehot_BTS, precision=_HI)

  def to_tokens(self, x_BS):
    return jnp.take_along_axis(x_BS, self.index_BT, axis=1)

  def masked_mean(self, x_BT, mask_BT):
    """Per sequence: mean of x over its masked tokens (0 for a sequence with none)."""
    return self.sum(x_BT * mask_BT) / jnp.maximum(self.sum(mask_BT), 1.0)


def token_logprobs(logits_BTV, tokens_BT, with_entropy: bool = True):
  """Log-probs of the tokens (aligned as in the module docstring) and the entropy at each."""
  logp_BT, ent_BT = target_logprobs(logits_BTV[:, :-1], tokens_BT[:, 1:], with_entropy)
  pad = ((0, 0), (1, 0))
  return jnp.pad(logp_BT, pad), None if ent_BT is None else jnp.pad(ent_BT, pad)


def target_logprobs(logits_BNV, targets_BN, with_entropy: bool = True):
  """log p(targets[b, n]) under the logits at [b, n] (no shift) and the entropy there.

  One exp pass serves the log-normaliser, its gradient and the entropy, so the entropy
  metric costs little next to a plain cross-entropy.
  """
  logits = logits_BNV.astype(jnp.float32)
  m_BN1 = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
  e_BNV = jnp.exp(logits - m_BN1)
  s_BN = jnp.sum(e_BNV, axis=-1)
  lse_BN = jnp.log(s_BN) + m_BN1[..., 0]
  picked_BN = jnp.take_along_axis(logits, targets_BN[..., None], axis=-1)[..., 0]
  if not with_entropy:
    return picked_BN - lse_BN, None
  return picked_BN - lse_BN, lse_BN - jnp.sum(e_BNV * logits, axis=-1) / s_BN


def _ratio(log_ratio_BT, cfg: LossConfig):
  c = cfg.log_ratio_clamp
  return jnp.exp(jnp.clip(log_ratio_BT, -c, c))


def _clipped_surrogate(ratio_BT, adv_BT, cfg: LossConfig):
  """PPO-clip with clip-higher bounds and the optional dual clip (only where A < 0)."""
  lo, hi = 1.0 - cfg.clip_low, 1.0 + cfg.clip_high
  pg_BT = jnp.maximum(-adv_BT * ratio_BT, -adv_BT * jnp.clip(ratio_BT, lo, hi))
  metrics = {
    "clip_frac_low": ((ratio_BT < lo) & (adv_BT < 0)).astype(jnp.float32),
    "clip_frac_high": ((ratio_BT > hi) & (adv_BT > 0)).astype(jnp.float32),
  }
  if cfg.dual_clip is not None:
    cap_BT = -adv_BT * cfg.dual_clip
    dual_BT = (adv_BT < 0) & (pg_BT > cap_BT)
    pg_BT = jnp.where(adv_BT < 0, jnp.minimum(pg_BT, cap_BT), pg_BT)
    metrics["dual_clip_frac"] = dual_BT.astype(jnp.float32)
  return pg_BT, metrics


@POLICY_LOSSES.register("ppo")
def ppo_loss(logp_BT, old_BT, adv_BT, mask_BT, segs: Segments, cfg: LossConfig):
  """Token-level PPO-clip: ratio = pi / pi_old per token."""
  del mask_BT, segs
  ratio_BT = _ratio(logp_BT - old_BT, cfg)
  pg_BT, metrics = _clipped_surrogate(ratio_BT, adv_BT, cfg)
  return pg_BT, ratio_BT, metrics


@POLICY_LOSSES.register("gspo")
def gspo_loss(logp_BT, old_BT, adv_BT, mask_BT, segs: Segments, cfg: LossConfig):
  """GSPO: one ratio per sequence, exp(mean over its tokens of the log-ratio), clipped.

  Each token's ratio is sg(s_i) * pi_t / sg(pi_t): its value is the sequence ratio s_i
  and its gradient s_i * grad log pi_t, so every token still gets a gradient.
  """
  seq_lr_BS = segs.masked_mean(logp_BT - old_BT, mask_BT)
  c = cfg.log_ratio_clamp
  seq_lr_BT = segs.to_tokens(jnp.clip(seq_lr_BS, -c, c))
  ratio_BT = jnp.exp(jax.lax.stop_gradient(seq_lr_BT) + logp_BT - jax.lax.stop_gradient(logp_BT))
  pg_BT, metrics = _clipped_surrogate(ratio_BT, adv_BT, cfg)
  return pg_BT, ratio_BT, metrics


@POLICY_LOSSES.register("cispo")
def cispo_loss(logp_BT, old_BT, adv_BT, mask_BT, segs: Segments, cfg: LossConfig):
  """CISPO (MiniMax-M1): -sg(clip(ratio, 1-clip_low, 1+clip_high)) * A * log pi.

  The importance weight is clipped, never the gradient, so clipped tokens still learn.
  """
  del mask_BT, segs
  ratio_BT = _ratio(logp_BT - old_BT, cfg)
  lo, hi = 1.0 - cfg.clip_low, 1.0 + cfg.clip_high
  w_BT = jax.lax.stop_gradient(jnp.clip(ratio_BT, lo, hi))
  metrics = {
    "clip_frac_low": (ratio_BT < lo).astype(jnp.float32),
    "clip_frac_high": (ratio_BT > hi).astype(jnp.float32),
  }
  return -adv_BT * w_BT * logp_BT, ratio_BT, metrics


@KL_ESTIMATORS.register("k1")
def kl_k1(delta_BT, cfg: LossConfig):
  del cfg
  return -delta_BT


@KL_ESTIMATORS.register("k2")
def kl_k2(delta_BT, cfg: LossConfig):
  del cfg
  return 0.5 * jnp.square(delta_BT)


@KL_ESTIMATORS.register("k3")
def kl_k3(delta_BT, cfg: LossConfig):
  k3_BT = jnp.exp(delta_BT) - 1.0 - delta_BT
  return jnp.clip(k3_BT, -cfg.kl_clamp, cfg.kl_clamp)


def kl_penalty(logp_BT, ref_BT, cfg: LossConfig):
  """Per-token KL(pi || pi_ref) estimate by name; delta = log pi_ref - log pi (clamped)."""
  c = cfg.log_ratio_clamp
  delta_BT = jnp.clip(ref_BT - logp_BT, -c, c)
  return KL_ESTIMATORS.get(cfg.kl)(delta_BT, cfg)


@AGGREGATIONS.register("token-mean")
def agg_token_mean(x_BT, mask_BT, segs: Segments, d: Denoms):
  del segs
  return jnp.sum(x_BT * mask_BT) / jnp.maximum(d.n_tokens, 1.0)


@AGGREGATIONS.register("seq-mean-token-mean")
def agg_seq_mean_token_mean(x_BT, mask_BT, segs: Segments, d: Denoms):
  return jnp.sum(segs.masked_mean(x_BT, mask_BT)) / jnp.maximum(d.n_seqs, 1.0)


@AGGREGATIONS.register("seq-mean-token-sum")
def agg_seq_mean_token_sum(x_BT, mask_BT, segs: Segments, d: Denoms):
  del segs
  return jnp.sum(x_BT * mask_BT) / jnp.maximum(d.n_seqs, 1.0)


@AGGREGATIONS.register("seq-mean-token-sum-norm")
def agg_seq_mean_token_sum_norm(x_BT, mask_BT, segs: Segments, d: Denoms):
  """Dr. GRPO: token sums divided by a constant length, averaged over sequences."""
  del segs
  return jnp.sum(x_BT * mask_BT) / (jnp.maximum(d.n_seqs, 1.0) * d.norm_length)


def behaviour_weights(prox_BT, behave_BT, mask_BT, segs: Segments, cfg: LossConfig):
  """Decoupled PPO weight w = pi_prox / pi_behave, truncated at or masked above is_cap.

  At sequence level w is the geometric mean over the sequence's loss tokens.
  """
  lr_BT = prox_BT - behave_BT
  if cfg.is_level == "sequence":
    lr_BT = segs.to_tokens(segs.masked_mean(lr_BT, mask_BT))
  w_BT = jax.lax.stop_gradient(_ratio(lr_BT, cfg))
  if cfg.is_mode == "truncate":
    return jnp.minimum(w_BT, cfg.is_cap), (w_BT > cfg.is_cap).astype(jnp.float32)
  over_BT = w_BT > cfg.is_cap
  return jnp.where(over_BT, 0.0, w_BT), over_BT.astype(jnp.float32)


def mismatch(logp_BT, behave_BT, cfg: LossConfig) -> dict:
  """Train-inference mismatch per token: |log mu - log pi| and the k3 estimate of KL(mu || pi).

  mu is the engine's behaviour policy (the tokens were sampled from it), pi the trainer's
  log-probs of the same params: r = pi / mu, KL(mu || pi) ~ r - 1 - log r. Before any update
  they differ only by numerics (kernels, dtype, batch shape), so this is a correctness probe.
  """
  c = cfg.log_ratio_clamp
  lr_BT = jnp.clip(jax.lax.stop_gradient(logp_BT) - behave_BT, -c, c)
  return {"mismatch_mean": jnp.abs(lr_BT), "mismatch_kl": jnp.expm1(lr_BT) - lr_BT}


def loss_from_logprobs(logp_BT, ent_BT, inputs: dict, segs: Segments, d: Denoms, cfg: LossConfig):
  """The scalar loss and per-token metric arrays from the current policy's log-probs.

  inputs: loss_mask_BT (final), advantages_BT, old_logprobs_BT (behaviour policy),
  optional prox_logprobs_BT (decoupled; the ratio is taken against it) and
  ref_logprobs_BT (when cfg.kl != 'none').
  """
  mask_BT = inputs["loss_mask_BT"].astype(jnp.float32)
  adv_BT = inputs["advantages_BT"].astype(jnp.float32)
  behave_BT = inputs["old_logprobs_BT"].astype(jnp.float32)
  agg = AGGREGATIONS.get(cfg.aggregation)
  anchor_BT = inputs["prox_logprobs_BT"] if cfg.decoupled else behave_BT
  pg_BT, ratio_BT, tok = POLICY_LOSSES.get(cfg.policy_loss)(
    logp_BT, anchor_BT, adv_BT, mask_BT, segs, cfg
  )
  if cfg.decoupled:
    w_BT, over_BT = behaviour_weights(anchor_BT, behave_BT, mask_BT, segs, cfg)
    pg_BT = pg_BT * w_BT  # the denominator still counts every masked token
    tok.update(is_weight=w_BT, is_over_cap_frac=over_BT)
  loss_BT = pg_BT
  tok["pg_loss"] = pg_BT
  if cfg.kl != "none":
    kl_BT = kl_penalty(logp_BT, inputs["ref_logprobs_BT"], cfg)
    loss_BT = loss_BT + cfg.kl_coef * kl_BT
    tok["kl"] = kl_BT
  if ent_BT is not None:
    if cfg.entropy_coef:
      loss_BT = loss_BT - cfg.entropy_coef * ent_BT
    tok["entropy"] = jax.lax.stop_gradient(ent_BT)
  log_ratio_BT = jnp.log(jnp.maximum(jax.lax.stop_gradient(ratio_BT), 1e-30))
  ratio_sg = jax.lax.stop_gradient(ratio_BT)
  # nll: the cross-entropy of the trained tokens; for the supervised loss (advantage 1, ratio 1:
  # rl.rft) the surrogate is a constant -1, so this is the loss worth watching.
  nll_BT = -jax.lax.stop_gradient(logp_BT)
  tok.update(ratio=ratio_sg, approx_kl=ratio_sg - 1.0 - log_ratio_BT, nll=nll_BT)
  tok.update(mismatch(logp_BT, behave_BT, cfg))
  metrics = {
    "sum": {k: jnp.sum(jax.lax.stop_gradient(v) * mask_BT) for k, v in tok.items()},
    "max": {
      "ratio": jnp.max(jnp.where(mask_BT > 0, ratio_sg, -jnp.inf)),
      "mismatch": jnp.max(jnp.where(mask_BT > 0, tok["mismatch_mean"], -jnp.inf)),
    },
    "min": {"ratio": jnp.min(jnp.where(mask_BT > 0, ratio_sg, jnp.inf))},
  }
  return agg(loss_BT, mask_BT, segs, d), metrics
