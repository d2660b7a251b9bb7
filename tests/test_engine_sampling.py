"""Sampling: filters vs a naive NumPy loop, a hand-computed case, empirical distributions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import sampling as smp


def _rows(params):
  return jax.tree.map(jnp.asarray, smp.stack_params(params))


def _naive_filtered_logp(logits, temperature, top_k, top_p):
  """One row, written as plainly as possible."""
  scaled = [x / temperature for x in logits]
  order = sorted(range(len(scaled)), key=lambda i: -scaled[i])
  keep = set(order[:top_k] if top_k > 0 else order)
  kept_sorted = [i for i in order if i in keep]
  z = sum(np.exp(scaled[i]) for i in kept_sorted)
  mass, nucleus = 0.0, set()
  for i in kept_sorted:
    if mass < top_p:
      nucleus.add(i)
    mass += np.exp(scaled[i]) / z
  z2 = sum(np.exp(scaled[i]) for i in nucleus)
  return np.array(
    [np.log(np.exp(scaled[i]) / z2) if i in nucleus else -np.inf for i in range(len(logits))]
  )


def test_filters_match_naive_loop():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(6, 40)).astype(np.float32) * 2
  params = [
    smp.SamplingParams(temperature=1.0),
    smp.SamplingParams(temperature=0.5, top_k=5),
    smp.SamplingParams(temperature=1.5, top_p=0.7),
    smp.SamplingParams(temperature=0.8, top_k=10, top_p=0.5),
    smp.SamplingParams(temperature=1.0, top_k=1),
    smp.SamplingParams(temperature=2.0, top_p=0.01),
  ]
  got = np.asarray(smp.log_probs(jnp.asarray(logits), _rows(params)))
  for row, p in enumerate(params):
    want = _naive_filtered_logp(logits[row].tolist(), p.temperature, p.top_k, p.top_p)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[row] > -1e29, finite)
    np.testing.assert_allclose(got[row][finite], want[finite], atol=1e-5)


def test_hand_computed_case():
  # probs of logits log([4, 3, 2, 1]) are [.4, .3, .2, .1]; top_p=0.6 keeps {0, 1} -> [4/7, 3/7].
  logits = jnp.log(jnp.array([[4.0, 3.0, 2.0, 1.0]]))
  lp = smp.log_probs(logits, _rows([smp.SamplingParams(top_p=0.6)]))
  np.testing.assert_allclose(np.exp(np.asarray(lp[0, :2])), [4 / 7, 3 / 7], rtol=1e-6)
  assert np.all(np.asarray(lp[0, 2:]) < -1e29)
  # greedy: argmax and the model's own log_softmax, whatever the temperature field says
  tok, logp = smp.sample_logprobs(logits, _rows([smp.SamplingParams(greedy=True)]), jnp.array([3]))
  assert int(tok[0]) == 0
  np.testing.assert_allclose(float(logp[0]), np.log(0.4), rtol=1e-6)


@pytest.mark.parametrize(
  "p", [smp.SamplingParams(temperature=0.7), smp.SamplingParams(top_k=3, top_p=0.9)]
)
def test_empirical_distribution_matches(p):
  """20k draws (one per position) against the filtered distribution; TV distance small."""
  logits = jnp.asarray(np.random.default_rng(1).normal(size=(1, 6)).astype(np.float32))
  n = 20000
  rows = _rows([p] * n)
  toks, logps = jax.jit(smp.sample_logprobs)(jnp.broadcast_to(logits, (n, 6)), rows, jnp.arange(n))
  want = np.exp(np.asarray(smp.log_probs(logits, _rows([p])))[0])
  freq = np.bincount(np.asarray(toks), minlength=6) / n
  assert 0.5 * np.abs(freq - want).sum() < 0.02  # 3 sigma of the TV estimate is ~0.01
  np.testing.assert_allclose(np.exp(np.asarray(logps)), want[np.asarray(toks)], rtol=1e-5)
  assert freq[want == 0].sum() == 0


def test_two_level_inverse_cdf_draw_matches_probabilities():
  # 300 tokens in blocks of 16 (the last block padded): a third have zero probability, the
  # rest a skewed mass; 40k rows of independent keys against the exact probabilities.
  rng = np.random.default_rng(2)
  p = rng.exponential(size=300) ** 3
  p[rng.permutation(300)[:100]] = 0.0
  p /= p.sum()
  n = 40000
  logp = jnp.broadcast_to(jnp.log(jnp.asarray(p, jnp.float32)), (n, 300))
  keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(0), i))(jnp.arange(n))
  toks = np.asarray(jax.jit(smp.draw, static_argnames="blocks")(logp, keys, blocks=16))
  freq = np.bincount(toks, minlength=300) / n
  assert freq[p == 0].sum() == 0 and toks.max() < 300
  assert 0.5 * np.abs(freq - p).sum() < 0.03  # expected TV of 40k draws from this p: 0.018
  # A one-hot row always gives its token, wherever it sits.
  one_hot = jnp.full((3, 300), -jnp.inf).at[jnp.arange(3), jnp.array([0, 157, 299])].set(0.0)
  np.testing.assert_array_equal(smp.draw(one_hot, keys[:3], blocks=16), [0, 157, 299])


def test_seed_and_position_make_the_key():
  logits = jnp.zeros((4, 1000))
  rows = _rows([smp.SamplingParams(seed=s) for s in (1, 1, 2, 1)])
  toks, _ = smp.sample_logprobs(logits, rows, jnp.array([5, 5, 5, 6]))
  t = np.asarray(toks)
  assert t[0] == t[1] and len({t[0], t[2], t[3]}) == 3


def test_bad_params_raise():
  with pytest.raises(ValueError, match="temperature"):
    smp.SamplingParams(temperature=0.0)
  with pytest.raises(ValueError, match="top_p"):
    smp.SamplingParams(top_p=0.0)
  with pytest.raises(ValueError, match="top_k"):
    smp.SamplingParams(top_k=-1)
