"""Generator(share_prompts=True): n samples of one prompt admitted together prefill its full
pages once; the others read them as context. Outputs equal separate prefills, pages balance."""

import jax
import numpy as np
import pytest

from models import config
from models import transformer as tfm
from models.inference.engine import Engine
from models.inference.generator import GenerationRequest, Generator
from models.sampling import SamplingParams

MAX_LEN, PAGE = 96, 8
GREEDY = SamplingParams(greedy=True)


@pytest.fixture(scope="module")
def engine():
  cfg = config.tiny("qwen3", max_seq_len=MAX_LEN)
  params = tfm.init(cfg, jax.random.PRNGKey(3))
  # Larger weights so greedy decoding does not just repeat one token.
  layers = jax.tree.map(lambda a: a * 10.0 if a.ndim >= 3 else a, params["layers"])
  params = dict(params, embed=params["embed"] * 3.0, layers=layers)
  return Engine(cfg, params, max_concurrent_decodes=16, page_size=PAGE, max_seq_len=MAX_LEN)


def _requests(seed):
  """4 samples each of a 21-token prompt, a 16-token one (exactly 2 pages) and a 5-token one."""
  rng = np.random.default_rng(seed)
  reqs = []
  for i, n in enumerate((21, 16, 5)):
    prompt = [int(x) for x in rng.integers(0, 256, n)]
    for j in range(4):
      samp = GREEDY if j == 0 else SamplingParams(temperature=1.0, seed=100 * i + j)
      reqs.append(GenerationRequest(prompt, 12, samp))
  return reqs


def _run(engine, reqs, **kw):
  with Generator(engine, **kw) as gen:
    out = gen.generate(reqs)
    stats = gen.stats()
    assert gen.pool.num_used == 0 and gen.pool.reserved == 0  # every page came back
  return out, stats


def _assert_same(a, b):
  for x, y in zip(a, b, strict=True):
    assert x.tokens == y.tokens and x.finish_reason == y.finish_reason
    np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-5)


def test_samples_of_one_prompt_prefill_it_once_with_the_same_outputs(engine):
  reqs = _requests(0)
  shared, s_stats = _run(engine, reqs)
  alone, a_stats = _run(engine, reqs, share_prompts=False)
  _assert_same(shared, alone)
  assert len({tuple(r.tokens) for r in shared[:4]}) > 1  # the samples differ
  # Followers reuse every full page but the one holding the prompt's last token.
  assert [r.cached_prefix_len for r in shared] == [0, 16, 16, 16, 0, 8, 8, 8, 0, 0, 0, 0]
  assert all(r.cached_prefix_len == 0 for r in alone)
  assert a_stats["prefill_tokens"] == 4 * (21 + 16 + 5)
  assert s_stats["prefill_tokens"] == 21 + 3 * 5 + 16 + 3 * 8 + 4 * 5
  assert s_stats["cached_prompt_tokens"] == 3 * 16 + 3 * 8


def test_sharing_is_per_admission_round_and_composes_with_the_prefix_cache(engine):
  reqs = _requests(1)
  alone, _ = _run(engine, reqs, share_prompts=False)
  # Fewer slots than requests: later rounds find no leader of their own round.
  small = Engine(
    engine.cfg, engine.params, max_concurrent_decodes=3, page_size=PAGE, max_seq_len=MAX_LEN
  )
  few, few_stats = _run(small, reqs)
  _assert_same(few, alone)
  assert few_stats["cached_prompt_tokens"] > 0
  cached, c_stats = _run(engine, reqs, prefix_caching=True)
  _assert_same(cached, alone)
  assert c_stats["cached_prompt_tokens"] == 3 * 16 + 3 * 8
