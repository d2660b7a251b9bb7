"""The KV-cache policy for a weight swap under running episodes (rl.runtime.weight_sync).

reprefill (default): a request in flight finishes on the weights it started with, the next turn
of its session is prefilled again under the new ones, so every recorded behaviour log-prob is the
log-prob of its tagged version recomputed from scratch. keep: the next turn attends over K/V the
old weights wrote, and its log-probs are no version's (the equivalence fails, as it must)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import config
from models import transformer as tfm
from models.inference.engine import Engine
from models.inference.generator import GenerationRequest, Generator
from models.sampling import SamplingParams
from rl.config import EngineConfig
from rl.runtime.weight_sync import ExactSwap

L = 96
CFG = config.tiny("qwen3", max_seq_len=L)


def _params(seed):
  p = tfm.init(CFG, jax.random.PRNGKey(seed))  # scaled up: outputs depend visibly on weights
  layers = jax.tree.map(lambda a: a * 10.0 if a.ndim >= 3 else a, p["layers"])
  return dict(p, embed=p["embed"] * 3.0, layers=layers)


P = [_params(0), _params(1)]
_logp = jax.jit(lambda p, t: jax.nn.log_softmax(tfm.apply(p, t, CFG), axis=-1))


def _recomputed(prompt, res):
  """log pi_v(token | context) from a full forward under each token's tagged version v."""
  full = np.zeros((1, L), np.int32)
  full[0, : len(prompt) + len(res.tokens)] = prompt + res.tokens
  by_v = {v: np.asarray(_logp(P[v], jnp.asarray(full)))[0] for v in set(res.versions)}
  n = len(prompt)
  return [
    float(by_v[v][n - 1 + i, t])
    for i, (t, v) in enumerate(zip(res.tokens, res.versions, strict=True))
  ]


def _two_turns(gen, swap_mid_turn):
  rng = np.random.default_rng(0)
  turn1 = [int(x) for x in rng.integers(0, CFG.vocab_size, 17)]
  f1 = gen.submit(GenerationRequest(turn1, 12, SamplingParams(seed=1), session_id="ep"))
  if swap_mid_turn:
    gen.load_params(P[1], 1)  # turn 1 is in flight
  r1 = f1.result(timeout=600)
  if not swap_mid_turn:
    gen.load_params(P[1], 1)
  turn2 = turn1 + r1.tokens + [int(x) for x in rng.integers(0, CFG.vocab_size, 5)]
  r2 = gen.submit(GenerationRequest(turn2, 12, SamplingParams(seed=2), session_id="ep")).result(
    timeout=600
  )
  return (turn1, r1), (turn2, r2)


@pytest.fixture(scope="module")
def shared_engine():
  return Engine(CFG, P[0], max_concurrent_decodes=2, page_size=8, max_seq_len=L)


@pytest.fixture
def engine(shared_engine):
  shared_engine.load_params(P[0], 0)  # compiled once for the module; each test starts at v0
  return shared_engine


def test_reprefill_every_token_is_exactly_its_tagged_version(engine):
  with ExactSwap(Generator(engine, decode_chunk=2, warmup=False)) as gen:
    (t1, r1), (t2, r2) = _two_turns(gen, swap_mid_turn=True)
    assert set(r1.versions) == {0}  # the swap waited for the turn in flight
    assert set(r2.versions) == {1}
    assert r2.cached_prefix_len == 0 and gen.stats()["reprefilled_sessions"] == 1
    assert gen.stats()["swaps"] == 1 and gen.wait_swapped(timeout=0)
    for prompt, res in ((t1, r1), (t2, r2)):
      np.testing.assert_allclose(res.logprobs, _recomputed(prompt, res), atol=1e-5, rtol=0)


def test_keep_reuses_old_kv_and_its_logprobs_are_no_versions(engine):
  with Generator(engine, decode_chunk=2, warmup=False) as gen:
    (t1, r1), (t2, r2) = _two_turns(gen, swap_mid_turn=False)
    assert set(r1.versions) == {0} and set(r2.versions) == {1}
    assert r2.cached_prefix_len > len(t1)  # turn 1's K/V, written by version 0
    np.testing.assert_allclose(r1.logprobs, _recomputed(t1, r1), atol=1e-5, rtol=0)
    err = np.abs(np.array(r2.logprobs) - _recomputed(t2, r2))
    assert err.max() > 1e-2  # mismatch: the behaviour log-prob is not pi_1's


def test_prefix_cache_is_keyed_by_weights_no_stale_page_after_a_swap(engine):
  """RL's shared system prompt: cached within a weight version, never across a swap."""
  rng = np.random.default_rng(3)
  system = [int(x) for x in rng.integers(0, CFG.vocab_size, 24)]  # 3 full pages of 8
  prompts = [system + [int(x) for x in rng.integers(0, CFG.vocab_size, 5)] for _ in range(4)]
  with ExactSwap(Generator(engine, decode_chunk=2, warmup=False, prefix_caching=True)) as gen:
    got = []
    for i, prompt in enumerate(prompts):
      if i == 2:
        gen.load_params(P[1], 1)
      req = GenerationRequest(prompt, 6, SamplingParams(seed=i), session_id=f"ep{i}")
      got.append(gen.submit(req).result(timeout=600))
    assert [r.cached_prefix_len for r in got] == [0, 24, 0, 24]  # the swap dropped v0's pages
    assert [set(r.versions) for r in got] == [{0}, {0}, {1}, {1}]
    for prompt, res in zip(prompts, got, strict=True):
      np.testing.assert_allclose(res.logprobs, _recomputed(prompt, res), atol=1e-5, rtol=0)
    for i in range(4):
      gen.release_session(f"ep{i}")
    assert gen.pool.num_used == 0 and gen.pool.num_cached == 3  # only v1's blocks are cached


def test_engine_config_picks_the_policy():
  assert EngineConfig().kv_on_swap == "reprefill"  # the default keeps log-probs exact
  assert EngineConfig().prefix_caching  # RL shares the system prompt's pages (keyed by weights)
  with pytest.raises(ValueError, match="kv_on_swap must be 'reprefill' or 'keep'"):
    EngineConfig(kv_on_swap="drop")
