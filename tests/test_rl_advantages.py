"""Advantage estimators: naive NumPy loop, hand-computed values, group of one, registry."""

import numpy as np
import pytest

from rl import advantages as adv
from rl.registry import ADVANTAGES

NAMES = ["grpo", "dr_grpo", "rloo", "batch_std"]


def naive(name, r, g, v, eps):
  """Deliberately plain loops over sequences."""
  out = np.zeros(len(r))
  valid = [i for i in range(len(r)) if v[i]]
  br = [r[i] for i in valid]
  bmean = sum(br) / len(br)
  bstd = (sum((x - bmean) ** 2 for x in br) / max(len(br) - 1, 1)) ** 0.5
  for i in valid:
    mates = [r[j] for j in valid if g[j] == g[i]]
    n = len(mates)
    if n < 2:
      continue
    mean = sum(mates) / n
    std = (sum((x - mean) ** 2 for x in mates) / (n - 1)) ** 0.5
    if name == "grpo":
      out[i] = (r[i] - mean) / (std + eps)
    elif name == "dr_grpo":
      out[i] = r[i] - mean
    elif name == "rloo":
      out[i] = r[i] - (sum(mates) - r[i]) / (n - 1)
    else:
      out[i] = (r[i] - mean) / (bstd + eps)
  return out


@pytest.mark.parametrize("name", NAMES)
def test_matches_naive_loop(name):
  rng = np.random.default_rng(0)
  n = 40
  r = rng.normal(size=n).astype(np.float32) * 3
  r[:4] = 1.0  # a group whose rewards are all equal
  g = rng.choice([7, 3, -2, 11, 5], size=n).astype(np.int32)
  g[:4] = 99
  g[4] = 1234  # a group of one
  v = rng.random(n) > 0.15
  v[:5] = True
  got = np.asarray(adv.compute_advantages(name, r, g, v, 1e-6))
  want = naive(name, r.astype(np.float64), g, v, 1e-6)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert got[4] == 0.0 and np.all(got[:4] == 0.0)
  assert np.all(got[~v] == 0.0)


def test_hand_computed():
  # group 0: rewards 1, 0, 2 (mean 1, ddof-1 std 1); group 1: a lone 5; slot 4 is padding.
  r = np.array([1.0, 0.0, 2.0, 5.0, 100.0], np.float32)
  g = np.array([0, 0, 0, 1, 0], np.int32)
  v = np.array([1, 1, 1, 1, 0], bool)
  f = lambda name: np.asarray(adv.compute_advantages(name, r, g, v, 0.0))
  np.testing.assert_allclose(f("grpo"), [0, -1, 1, 0, 0], atol=1e-6)
  np.testing.assert_allclose(f("dr_grpo"), [0, -1, 1, 0, 0], atol=1e-6)
  np.testing.assert_allclose(f("rloo"), [0, -1.5, 1.5, 0, 0], atol=1e-6)
  # batch std over 1, 0, 2, 5: mean 2, var (1 + 4 + 0 + 9) / 3.
  s = np.sqrt(14 / 3)
  np.testing.assert_allclose(f("batch_std"), [0, -1 / s, 1 / s, 0, 0], atol=1e-6)


def test_eps_in_denominator():
  r = np.array([1.0, 1.0 + 1e-7], np.float32)
  got = np.asarray(adv.grpo(r, np.zeros(2, np.int32), np.ones(2, bool), eps=1e-2))
  assert np.all(np.abs(got) < 1e-3)  # eps keeps a near-zero std from blowing up


def test_overlong_penalty_hand_computed():
  # L_max 10, buffer 4: free up to 6 tokens, then -1/4 per token, -1 from 10 on.
  got = np.asarray(adv.overlong_penalty(np.array([3, 6, 7, 9, 10, 14]), 10, 4))
  np.testing.assert_allclose(got, [0, 0, -0.25, -0.75, -1, -1])


def test_registry_names_and_error():
  assert set(NAMES) <= set(ADVANTAGES.names())
  with pytest.raises(ValueError, match="LossConfig.advantage: unknown .*'nope'.*grpo"):
    adv.compute_advantages("nope", np.zeros(2), np.zeros(2), np.ones(2), 1e-6)
