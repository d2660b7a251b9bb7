"""Policy losses, KL, aggregation, decoupled PPO: naive NumPy loops, hand cases, gradients."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from rl import losses
from rl.config import LossConfig

B, T, S = 3, 10, 2


def make_inputs(seed=0, spread=0.3):
  rng = np.random.default_rng(seed)
  seg = np.zeros((B, T), np.int32)
  seg[0, :6], seg[0, 6:9] = 1, 2  # two packed sequences, one pad token
  seg[1, :] = 1
  seg[2, :4], seg[2, 4:] = 1, 2
  mask = (rng.random((B, T)) > 0.3).astype(np.float32) * (seg > 0)
  mask[:, 0] = 0
  old = -rng.random((B, T)).astype(np.float32) * 2
  logp = old + rng.normal(size=(B, T)).astype(np.float32) * spread
  prox = old + rng.normal(size=(B, T)).astype(np.float32) * spread
  ref = old + rng.normal(size=(B, T)).astype(np.float32) * spread
  adv_BS = rng.normal(size=(B, S)).astype(np.float32)
  ent = rng.random((B, T)).astype(np.float32)
  return dict(seg=seg, mask=mask, old=old, logp=logp, prox=prox, ref=ref, adv_BS=adv_BS, ent=ent)


def run(x, cfg, logp=None):
  segs = losses.Segments.make(jnp.asarray(x["seg"]), S)
  inputs = {
    "loss_mask_BT": x["mask"],
    "advantages_BT": segs.to_tokens(jnp.asarray(x["adv_BS"])),
    "old_logprobs_BT": x["old"],
    "prox_logprobs_BT": x["prox"],
    "ref_logprobs_BT": x["ref"],
  }
  d = denoms(x, cfg)
  return losses.loss_from_logprobs(
    jnp.asarray(x["logp"] if logp is None else logp), jnp.asarray(x["ent"]), inputs, segs, d, cfg
  )


def seq_members(x):
  """{(b, s): [token indices with a loss]} by plain loops."""
  out = {}
  for b in range(B):
    for t in range(T):
      if x["seg"][b, t] > 0 and x["mask"][b, t] > 0:
        out.setdefault((b, x["seg"][b, t] - 1), []).append(t)
  return out


def denoms(x, cfg):
  n_seqs = len(seq_members(x))
  return losses.Denoms(
    jnp.float32(x["mask"].sum()), jnp.float32(n_seqs), jnp.float32(cfg.norm_length or T)
  )


def naive_token_loss(x, cfg, b, t, members):
  """The loss of one token, written out with math on Python floats."""
  s = x["seg"][b, t] - 1
  a = float(x["adv_BS"][b, s])
  lp, old, prox = float(x["logp"][b, t]), float(x["old"][b, t]), float(x["prox"][b, t])
  anchor = prox if cfg.decoupled else old
  c = cfg.log_ratio_clamp
  clampc = lambda v: min(max(v, -c), c)
  if cfg.policy_loss == "gspo":
    toks = members[(b, s)]
    lr = sum(
      float(x["logp"][b, u]) - (float(x["prox"][b, u]) if cfg.decoupled else float(x["old"][b, u]))
      for u in toks
    ) / len(toks)
    ratio = math.exp(clampc(lr))
  else:
    ratio = math.exp(clampc(lp - anchor))
  lo, hi = 1 - cfg.clip_low, 1 + cfg.clip_high
  if cfg.policy_loss == "cispo":
    loss = -a * min(max(ratio, lo), hi) * lp
  else:
    loss = max(-a * ratio, -a * min(max(ratio, lo), hi))
    if cfg.dual_clip is not None and a < 0:
      loss = min(loss, -a * cfg.dual_clip)
  if cfg.decoupled:
    if cfg.is_level == "sequence":
      toks = members[(b, s)]
      lw = sum(float(x["prox"][b, u]) - float(x["old"][b, u]) for u in toks) / len(toks)
    else:
      lw = prox - old
    w = math.exp(clampc(lw))
    w = min(w, cfg.is_cap) if cfg.is_mode == "truncate" else (0.0 if w > cfg.is_cap else w)
    loss *= w
  if cfg.kl != "none":
    d = clampc(float(x["ref"][b, t]) - lp)
    kl = {
      "k1": -d,
      "k2": d * d / 2,
      "k3": min(max(math.exp(d) - 1 - d, -cfg.kl_clamp), cfg.kl_clamp),
    }[cfg.kl]
    loss += cfg.kl_coef * kl
  return loss - cfg.entropy_coef * float(x["ent"][b, t])


def naive_loss(x, cfg):
  members = seq_members(x)
  per_seq = {
    k: [naive_token_loss(x, cfg, k[0], t, members) for t in ts] for k, ts in members.items()
  }
  n_tok = sum(len(v) for v in per_seq.values())
  n_seq = len(per_seq)
  total = sum(sum(v) for v in per_seq.values())
  if cfg.aggregation == "token-mean":
    return total / n_tok
  if cfg.aggregation == "seq-mean-token-mean":
    return sum(sum(v) / len(v) for v in per_seq.values()) / n_seq
  if cfg.aggregation == "seq-mean-token-sum":
    return total / n_seq
  return total / (n_seq * (cfg.norm_length or T))


CASES = [
  dict(),
  dict(clip_high=0.2),
  dict(dual_clip=3.0),
  dict(policy_loss="gspo", clip_low=3e-2, clip_high=4e-2, aggregation="seq-mean-token-mean"),
  dict(policy_loss="cispo", clip_low=0.5, clip_high=0.1),
  dict(kl="k1", kl_coef=0.1),
  dict(kl="k2", kl_coef=0.1),
  dict(kl="k3", kl_coef=0.1, kl_clamp=0.05),
  dict(aggregation="seq-mean-token-mean"),
  dict(aggregation="seq-mean-token-sum"),
  dict(aggregation="seq-mean-token-sum-norm", norm_length=16),
  dict(decoupled=True, is_cap=1.2),
  dict(decoupled=True, is_cap=1.1, is_mode="mask"),
  dict(decoupled=True, is_level="sequence", is_cap=1.05),
  dict(decoupled=True, policy_loss="gspo", is_level="sequence", is_mode="mask", is_cap=1.1),
  dict(entropy_coef=0.01, dual_clip=2.0, kl="k3", kl_coef=0.05),
  dict(log_ratio_clamp=0.1),
]


@pytest.mark.parametrize(
  "kw", CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default"
)
def test_loss_matches_naive_loop(kw):
  cfg = LossConfig(**kw)
  x = make_inputs(seed=1, spread=0.8)
  got, metrics = run(x, cfg)
  np.testing.assert_allclose(float(got), naive_loss(x, cfg), rtol=2e-5, atol=1e-6)
  for v in jax.tree.leaves(metrics):
    assert np.isfinite(np.asarray(v)).all()


def hand_inputs(logp, old, adv):
  """One row, one sequence: token 0 is the prompt, tokens 1.. carry the given values."""
  n = len(logp) + 1
  pad = lambda v: np.asarray([0.0, *v], np.float32)[None]
  return dict(
    seg=np.ones((1, n), np.int32),
    mask=pad([1] * (n - 1)),
    old=pad(old),
    logp=pad(logp),
    prox=pad(old),
    ref=pad(old),
    adv_BS=np.asarray([[adv]], np.float32),
    ent=np.zeros((1, n), np.float32),
  )


def run1(x, cfg):
  segs = losses.Segments.make(jnp.asarray(x["seg"]), 1)
  inputs = {
    "loss_mask_BT": x["mask"],
    "advantages_BT": segs.to_tokens(jnp.asarray(x["adv_BS"])),
    "old_logprobs_BT": x["old"],
    "prox_logprobs_BT": x["prox"],
    "ref_logprobs_BT": x["ref"],
  }
  n = float(x["mask"].sum())
  d = losses.Denoms(jnp.float32(n), jnp.float32(1), jnp.float32(n))
  return losses.loss_from_logprobs(jnp.asarray(x["logp"]), None, inputs, segs, d, cfg)


def test_ppo_hand_computed():
  ln = math.log
  # A = +1: ratios 1.5 (clipped at 1.28), 1.1 (inside), 0.5 (no lower clip when A > 0).
  loss, m = run1(hand_inputs([ln(1.5), ln(1.1), ln(0.5)], [0, 0, 0], 1.0), LossConfig())
  np.testing.assert_allclose(float(loss), (-1.28 - 1.1 - 0.5) / 3, rtol=1e-6)
  np.testing.assert_allclose(float(m["sum"]["clip_frac_high"]), 1.0)
  # A = -1: ratio 0.5 -> clipped 0.8; ratio 5 -> 5, dual clip c=3 caps it at 3.
  x = hand_inputs([ln(0.5), ln(5.0)], [0, 0], -1.0)
  np.testing.assert_allclose(float(run1(x, LossConfig())[0]), (0.8 + 5.0) / 2, rtol=1e-6)
  loss, m = run1(x, LossConfig(dual_clip=3.0))
  np.testing.assert_allclose(float(loss), (0.8 + 3.0) / 2, rtol=1e-6)
  np.testing.assert_allclose(float(m["sum"]["dual_clip_frac"]), 1.0)
  np.testing.assert_allclose(float(m["sum"]["clip_frac_low"]), 1.0)


def test_supervised_loss_reports_its_cross_entropy():
  """RFT's loss (rl.rft.supervised_loss: advantage 1, ratio 1) is the constant -1 surrogate;
  the `nll` metric is the masked tokens' cross-entropy: -(ln .5 + ln .25) summed."""
  from rl import rft

  ln = math.log
  x = hand_inputs([ln(0.5), ln(0.25)], [ln(0.5), ln(0.25)], 1.0)
  loss, m = run1(x, rft.supervised_loss())
  np.testing.assert_allclose(float(loss), -1.0, rtol=1e-6)
  np.testing.assert_allclose(float(m["sum"]["nll"]), -(ln(0.5) + ln(0.25)), rtol=1e-6)


def test_gspo_and_cispo_hand_computed():
  ln = math.log
  # GSPO: log-ratios log 2 and 0 -> sequence ratio sqrt(2) = 1.414 > 1.28 -> clipped, A = 1.
  x = hand_inputs([ln(2.0), 0.0], [0, 0], 1.0)
  loss, _ = run1(x, LossConfig(policy_loss="gspo"))
  np.testing.assert_allclose(float(loss), -1.28, rtol=1e-6)
  loss, _ = run1(x, LossConfig(policy_loss="gspo", clip_high=1.0))
  np.testing.assert_allclose(float(loss), -math.sqrt(2), rtol=1e-6)
  # CISPO: -A * clip(r) * log pi; r = 2 -> 1.28 with logp = log 2 - 1 (old = -1).
  x = hand_inputs([ln(2.0) - 1.0], [-1.0], 2.0)
  loss, _ = run1(x, LossConfig(policy_loss="cispo"))
  np.testing.assert_allclose(float(loss), -2.0 * 1.28 * (ln(2.0) - 1.0), rtol=1e-6)


def test_kl_estimators_hand_computed():
  # log pi = log 0.5, log pi_ref = log 0.25: delta = -log 2.
  d = -math.log(2)
  logp, ref = jnp.float32(math.log(0.5)), jnp.float32(math.log(0.25))
  for name, want in [("k1", -d), ("k2", d * d / 2), ("k3", 0.5 - 1 - d)]:
    got = losses.kl_penalty(logp, ref, LossConfig(kl=name))
    np.testing.assert_allclose(float(got), want, rtol=1e-6)
  # k3 is clamped; the log-ratio is clamped before exp (no inf for a 100-nat gap).
  got = losses.kl_penalty(jnp.float32(-100.0), jnp.float32(0.0), LossConfig(kl="k3", kl_clamp=10.0))
  assert float(got) == 10.0


def test_decoupled_denominator_keeps_masked_tokens():
  # Two tokens, the second's behaviour weight is far above the cap -> masked, yet the
  # denominator still counts 2 tokens.
  x = hand_inputs([0.0, 0.0], [0.0, -5.0], 1.0)
  x["prox"] = x["logp"].copy()
  loss, m = run1(x, LossConfig(decoupled=True, is_mode="mask", is_cap=2.0))
  np.testing.assert_allclose(float(loss), -1.0 / 2, rtol=1e-6)
  np.testing.assert_allclose(float(m["sum"]["is_over_cap_frac"]), 1.0)
  loss, _ = run1(x, LossConfig(decoupled=True, is_mode="truncate", is_cap=2.0))
  np.testing.assert_allclose(float(loss), (-1.0 - 2.0) / 2, rtol=1e-6)


SMOOTH = [
  dict(),
  dict(policy_loss="gspo", clip_low=0.9, clip_high=5.0),
  dict(kl="k3", kl_coef=0.5, kl_clamp=100.0),
  dict(kl="k2", kl_coef=0.5, aggregation="seq-mean-token-mean"),
  dict(decoupled=True, is_cap=1.1, aggregation="seq-mean-token-sum"),
]


@pytest.mark.parametrize("kw", SMOOTH)
def test_check_grads(kw):
  cfg = LossConfig(**{"clip_low": 0.9, "clip_high": 5.0, **kw})  # away from the kinks
  x = make_inputs(seed=2, spread=0.2)
  f = lambda logp: run(x, cfg, logp)[0]
  check_grads(f, (jnp.asarray(x["logp"]),), order=1, modes=["rev"], eps=1e-2, atol=2e-3, rtol=2e-3)


def test_cispo_gradient_is_clipped_weight_times_advantage():
  x = make_inputs(seed=3, spread=0.8)
  cfg = LossConfig(policy_loss="cispo", clip_low=0.3, clip_high=0.2)
  g = np.asarray(jax.grad(lambda lp: run(x, cfg, lp)[0])(jnp.asarray(x["logp"])))
  want = np.zeros((B, T))
  for b in range(B):
    for t in range(T):
      if x["mask"][b, t] > 0:
        r = math.exp(x["logp"][b, t] - x["old"][b, t])
        want[b, t] = -x["adv_BS"][b, x["seg"][b, t] - 1] * min(max(r, 0.7), 1.2) / x["mask"].sum()
  np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)


def test_gspo_gives_every_token_a_gradient():
  x = make_inputs(seed=4, spread=0.01)
  cfg = LossConfig(policy_loss="gspo")
  g = np.asarray(jax.grad(lambda lp: run(x, cfg, lp)[0])(jnp.asarray(x["logp"])))
  assert np.all((g != 0) == (x["mask"] > 0))


def test_token_logprobs_and_entropy_vs_numpy():
  rng = np.random.default_rng(5)
  logits = rng.normal(size=(2, 5, 7)).astype(np.float32) * 3
  tokens = rng.integers(0, 7, size=(2, 5)).astype(np.int32)
  logp, ent = losses.token_logprobs(jnp.asarray(logits), jnp.asarray(tokens))
  for b in range(2):
    assert logp[b, 0] == 0 and ent[b, 0] == 0
    for t in range(1, 5):
      z = logits[b, t - 1].astype(np.float64)
      p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
      np.testing.assert_allclose(logp[b, t], np.log(p[tokens[b, t]]), rtol=1e-5)
      np.testing.assert_allclose(ent[b, t], -(p * np.log(p)).sum(), rtol=1e-5)


def test_masked_tokens_do_not_matter():
  x = make_inputs(seed=6)
  cfg = LossConfig(kl="k3", kl_coef=0.1, policy_loss="gspo")
  y = {k: v.copy() for k, v in x.items()}
  off = x["mask"] == 0
  for k in ("logp", "old", "prox", "ref"):
    y[k][off] = 7.0
  np.testing.assert_allclose(float(run(x, cfg)[0]), float(run(y, cfg)[0]), rtol=1e-6)


def test_config_errors_name_the_field():
  with pytest.raises(ValueError, match="LossConfig.is_mode"):
    LossConfig(is_mode="clip")
  with pytest.raises(ValueError, match="LossConfig.policy_loss: unknown"):
    run(make_inputs(), dataclasses.replace(LossConfig(), policy_loss="ppo2"))
