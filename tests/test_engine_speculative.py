"""Speculative decoding: greedy output identical to the target's; sampled output follows the
target distribution (chi-square on a small vocabulary, fixed seeds)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from models import config
from models import sampling as smp
from models import transformer as tfm
from models.inference import speculative as spec


def _scaled(cfg, seed, s_embed, s_layers):
  p = tfm.init(cfg, jax.random.PRNGKey(seed))
  layers = jax.tree.map(lambda a: a * s_layers if a.ndim >= 3 else a, p["layers"])
  return dict(p, embed=p["embed"] * s_embed, layers=layers)


def _rows(sp, n):
  return jax.tree.map(jnp.asarray, smp.stack_params([sp] * n))


def test_greedy_identical_to_target_with_any_draft():
  cfg = config.tiny("qwen3", max_seq_len=64)
  target = _scaled(cfg, 0, 3.0, 10.0)
  # Layer-skip draft: the second layer's residual writes are zeroed. Same shapes as the target,
  # so both calls below share one compilation.
  zero_l1 = {n: target["layers"][n].at[1].set(0.0) for n in ("wo", "w_down")}
  draft = dict(target, layers=dict(target["layers"], **zero_l1))
  prompt = jnp.asarray(np.random.default_rng(0).integers(0, 256, (3, 7)), jnp.int32)
  rows = _rows(smp.SamplingParams(greedy=True), 3)
  toks, logps, stats = spec.generate(
    target, draft, prompt, rows, target_cfg=cfg, draft_cfg=cfg, max_new=20, k=3
  )
  apply = jax.jit(lambda t: tfm.apply(target, t, cfg))
  fwd = lambda seq: apply(jnp.asarray([seq + [0] * (27 - len(seq))]))[:, : len(seq)]  # one shape
  for b in range(3):  # naive reference: recompute everything for every token
    seq = list(map(int, prompt[b]))
    for _ in range(20):
      seq.append(int(jnp.argmax(fwd(seq)[0, -1])))
    assert list(map(int, toks[b])) == seq[7:]
    want = jax.nn.log_softmax(fwd(seq)[0], -1)
    np.testing.assert_allclose(logps[b], [want[6 + i, t] for i, t in enumerate(seq[7:])], atol=1e-5)
  assert 0 < int(stats["accepted"].sum()) < 3 * 3 * int(stats["rounds"].max())  # partial agreement
  # The target as its own draft accepts everything: 20 tokens in 5 rounds of k + 1 = 4.
  toks2, _, stats2 = spec.generate(
    target, target, prompt, rows, target_cfg=cfg, draft_cfg=cfg, max_new=20, k=3
  )
  assert bool((toks2 == toks).all()) and list(stats2["rounds"]) == [5, 5, 5]


def test_sampled_tokens_follow_target_distribution():
  V, n = 8, 6000
  cfg = config.tiny("qwen3", vocab_size=V, max_seq_len=32)
  target, draft = _scaled(cfg, 0, 20.0, 5.0), _scaled(cfg, 1, 20.0, 5.0)
  sp = smp.SamplingParams(temperature=0.9, top_k=6)
  prompt = [3, 1, 4]
  rows = jax.tree.map(
    jnp.asarray, smp.stack_params([smp.SamplingParams(0.9, 6, seed=i) for i in range(n)])
  )
  toks, _, _ = spec.generate(
    target, draft, jnp.asarray([prompt] * n, jnp.int32), rows,
    target_cfg=cfg, draft_cfg=cfg, max_new=2, k=2,
  )  # fmt: skip

  def joint(params):
    """Exact p(x1, x2 | prompt) under the filtered distribution, by teacher forcing."""
    seqs = jnp.asarray([prompt + [a, b] for a, b in itertools.product(range(V), range(V))])
    logp = smp.log_probs(tfm.apply(params, seqs, cfg).reshape(-1, V), _rows(sp, V * V * 5))
    logp = logp.reshape(V * V, 5, V)
    p1 = np.exp(np.asarray(logp[0, 2]))  # p(x1)
    p2 = np.exp(np.asarray(logp[:, 3])).reshape(V, V, V)[:, 0]  # p(x2 | x1)
    return (p1[:, None] * p2).reshape(-1)

  want, draft_dist = joint(target), joint(draft)
  counts = np.bincount(np.asarray(toks[:, 0] * V + toks[:, 1]), minlength=V * V)
  expected = n * want

  def chi2(exp):
    live = exp > 0
    assert counts[~live].sum() == 0, "sampled a token the filters exclude"
    return float(((counts[live] - exp[live]) ** 2 / exp[live]).sum()), int(live.sum()) - 1

  stat, dof = chi2(expected)
  # chi-square 0.999 quantile ~ dof + 3.1 sqrt(2 dof) (Wilson-Hilferty is close for dof > 20)
  assert stat < dof + 3.1 * np.sqrt(2 * dof), (stat, dof)
  assert 0.5 * np.abs(want - draft_dist).sum() > 0.2  # the draft alone would fail this test
  assert chi2(n * draft_dist + 1e-9 * (want > 0))[0] > 10 * (dof + 3.1 * np.sqrt(2 * dof))
