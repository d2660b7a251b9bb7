"""rl.runtime.mismatch: engine behaviour log-probs vs the trainer's fp32 forward, per tier.

A hand-computed case for the statistics, then episodes sampled by the real engine (paged KV
cache, prefill + decode) at each precision tier of EngineConfig and scored by the update
step's forward: fp32 agrees to 1e-5, the bf16 and int8 tiers measurably do not.
"""

import math

import jax
import numpy as np
import pytest
import sampled

from envs.agents.agent import Segment
from models import transformer
from models.config import tiny
from models.sampling import SamplingParams
from rl.config import EngineConfig
from rl.runtime import mismatch
from rl.runtime.replica import make_engine

CFG = tiny(
  "qwen3", vocab_size=96, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64, max_seq_len=64
)


def test_summary_matches_a_hand_computed_case():
  d = np.array([0.1, -0.2, 0.0, 0.05])
  got = mismatch.summarize(d)
  kl = sum(math.expm1(x) - x for x in d) / 4
  assert got["tokens"] == 4
  assert got["mean"] == pytest.approx(0.0875, abs=1e-12)
  assert got["max"] == pytest.approx(0.2, abs=1e-12)
  assert got["kl"] == pytest.approx(kl, rel=1e-5)
  assert mismatch.summarize(np.zeros(0))["mean"] is None


def _segments(params, engine_cfg: EngineConfig, n=6, **sampling):
  """n sampled completions of random prompts (own seed each) as agent Segments."""
  return [
    Segment(
      tokens=p + list(r.tokens),
      loss_mask=[0] * len(p) + [1] * len(r.tokens),
      logprobs=[0.0] * len(p) + list(r.logprobs),
      versions=[-1] * len(p) + [0] * len(r.tokens),
    )
    for p, r in sampled.sample(make_engine(CFG, params, engine_cfg), CFG.vocab_size, n, **sampling)
  ]


def test_tiers_against_the_trainers_fp32_forward():
  params = transformer.init(CFG, jax.random.key(1))
  base = EngineConfig(slots=4, max_seq_len=64)
  segs = _segments(params, base)
  fp32 = mismatch.score(CFG, params, segs)
  assert fp32["tokens"] == 6 * 12
  assert fp32["max"] <= 1e-5, fp32
  # The deltas are in token order and each one is the trainer minus the engine.
  d = mismatch.token_deltas(CFG, params, segs)
  assert d.shape == (72,) and np.abs(d).max() == pytest.approx(fp32["max"])
  for tier in (
    EngineConfig(slots=4, max_seq_len=64, dtype="bfloat16", kv_dtype="bfloat16"),
    EngineConfig(slots=4, max_seq_len=64, weight_dtype="int8", kv_dtype="int8"),
  ):
    got = mismatch.score(CFG, params, _segments(params, tier))
    assert got["tokens"] == 72
    assert 1e-4 < got["max"] < 1.0, (tier, got)  # measurable, and still the same policy
    assert 0 <= got["mean"] <= got["max"] and got["kl"] >= 0


def test_the_trainer_scores_the_distribution_the_engine_sampled_from():
  """At temperature 0.7 with top-k the behaviour log-probs are those of
  log_softmax(filter(logits / 0.7)): scored that way they agree; at temperature 1 they do not."""
  params = transformer.init(CFG, jax.random.key(2))
  sp = SamplingParams(temperature=0.7, top_k=20)
  segs = _segments(params, EngineConfig(slots=4, max_seq_len=64), temperature=0.7, top_k=20)
  assert mismatch.score(CFG, params, segs, sp)["max"] <= 1e-5
  assert mismatch.score(CFG, params, segs)["max"] > 1e-2


def test_engine_config_rejects_unknown_tiers():
  with pytest.raises(ValueError, match="EngineConfig.weight_dtype"):
    EngineConfig(weight_dtype="int4")
  with pytest.raises(ValueError, match="EngineConfig.kv_dtype"):
    EngineConfig(kv_dtype="fp8")
