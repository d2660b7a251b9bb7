"""Engine + Generator: cached decoding vs full recompute, batch independence, logprobs,
page leaks, prefix reuse, shared prefixes, hot swap without recompiling."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import config
from models import transformer as tfm
from models.inference.engine import TRACES, Engine
from models.inference.generator import GenerationRequest, Generator
from models.io.tokenizer import ByteTokenizer
from models.sampling import SamplingParams

MAX_LEN = 128
GREEDY = SamplingParams(greedy=True)


def _model(seed=0):
  """A tiny Qwen3 whose weights are scaled up so greedy decoding does not just repeat."""
  cfg = config.tiny("qwen3", max_seq_len=MAX_LEN)
  params = tfm.init(cfg, jax.random.PRNGKey(seed))
  layers = jax.tree.map(lambda a: a * 10.0 if a.ndim >= 3 else a, params["layers"])
  return cfg, dict(params, embed=params["embed"] * 3.0, layers=layers)


CFG, PARAMS = _model()
_apply = jax.jit(lambda p, t: tfm.apply(p, t, CFG))


def _full_logits(params, tokens):
  """Logits of a full (uncached) forward pass over `tokens`, padded to one compiled length."""
  padded = np.zeros((1, MAX_LEN), np.int32)
  padded[0, : len(tokens)] = tokens
  return np.asarray(_apply(params, jnp.asarray(padded)))[0, : len(tokens)]


def _recompute_greedy(params, prompt, n):
  """The naive reference: recompute the whole sequence for every new token."""
  toks, out = list(prompt), []
  for _ in range(n):
    out.append(int(np.argmax(_full_logits(params, toks)[-1])))
    toks.append(out[-1])
  return out


def _prompt(rng, n):
  return [int(x) for x in rng.integers(0, CFG.vocab_size, size=n)]


@pytest.fixture(scope="module")
def gen():
  eng = Engine(CFG, PARAMS, max_concurrent_decodes=4, page_size=8, max_seq_len=MAX_LEN)
  g = Generator(eng, prefix_caching=True)
  yield g
  g.close()


def _check_pool_empty(g):
  for sid in list(g._sessions):
    g.release_session(sid)
  deadline = time.time() + 10
  while g.stats()["active_slots"] and time.time() < deadline:
    time.sleep(0.01)
  assert g.pool.num_used == 0 and g.pool.reserved == 0
  assert g.pool.num_available == g.pool.num_pages - 1


def test_cached_greedy_equals_recompute_ragged_batch(gen):
  rng = np.random.default_rng(1)
  prompts = [_prompt(rng, n) for n in (1, 5, 17, 30, 9, 16, 8)]  # 7 requests, 4 slots
  reqs = [GenerationRequest(p, 12, GREEDY) for p in prompts]
  results = gen.generate(reqs)
  for p, r in zip(prompts, results, strict=True):
    assert r.tokens == _recompute_greedy(PARAMS, p, 12)
    assert r.finish_reason == "length" and r.prompt_len == len(p)
  single = gen.generate([reqs[3]])[0]
  assert single.tokens == results[3].tokens
  assert len(set(tuple(r.tokens) for r in results)) > 3  # the model is not degenerate


def test_chunked_dispatch_equals_single_steps(gen):
  # decode_chunk=8 (the fixture) runs several steps per call; the results must not change.
  rng = np.random.default_rng(8)
  prompts = [_prompt(rng, n) for n in (3, 14, 9, 21, 6)]
  first = gen.generate([GenerationRequest(prompts[0], 30, GREEDY)])[0].tokens
  reqs = [
    GenerationRequest(prompts[0], 30, GREEDY, stop_token_ids=(first[11],), session_id="c"),
    GenerationRequest(prompts[1], 25, SamplingParams(temperature=0.9, seed=5)),
    GenerationRequest(prompts[2], 17, GREEDY),
    GenerationRequest(prompts[3], 30, SamplingParams(temperature=1.2, top_k=40, seed=6)),
    GenerationRequest(prompts[4], 2, GREEDY),
  ]
  before = gen.stats()
  chunked = gen.generate(reqs)
  after = gen.stats()
  gen.release_session("c")
  with Generator(gen.engine, decode_chunk=1) as single:
    stepwise = single.generate(reqs)
    assert single.stats()["decode_dispatches"] == single.stats()["decode_steps"]
  steps = after["decode_steps"] - before["decode_steps"]
  assert after["decode_dispatches"] - before["decode_dispatches"] < steps / 2
  assert chunked[0].finish_reason == "stop" and len(chunked[0].tokens) <= 12
  for c, s in zip(chunked, stepwise, strict=True):
    assert c.tokens == s.tokens and c.finish_reason == s.finish_reason
    np.testing.assert_allclose(c.logprobs, s.logprobs, atol=1e-6)
  assert chunked[2].tokens == _recompute_greedy(PARAMS, prompts[2], 17)
  _check_pool_empty(gen)


def test_output_independent_of_batch_mates(gen):
  rng = np.random.default_rng(2)
  target = GenerationRequest(
    _prompt(rng, 11), 16, SamplingParams(temperature=0.8, top_k=50, top_p=0.9, seed=7)
  )
  alone = gen.generate([target])[0]
  others = [
    GenerationRequest(_prompt(rng, n), m, SamplingParams(temperature=1.3, seed=n))
    for n, m in ((3, 4), (20, 30), (7, 9))
  ]
  crowded = gen.generate(others[:2] + [target] + others[2:])[2]
  assert crowded.tokens == alone.tokens
  np.testing.assert_allclose(crowded.logprobs, alone.logprobs, atol=1e-6)


@pytest.mark.parametrize(
  "sampling",
  [GREEDY, SamplingParams(temperature=1.0, seed=3), SamplingParams(temperature=0.7, seed=4)],
)
def test_logprobs_equal_teacher_forced_forward(gen, sampling):
  rng = np.random.default_rng(3)
  prompt = _prompt(rng, 13)
  r = gen.generate([GenerationRequest(prompt, 20, sampling)])[0]
  logits = _full_logits(PARAMS, prompt + r.tokens)
  temp = 1.0 if sampling.greedy else sampling.temperature
  logp = jax.nn.log_softmax(jnp.asarray(logits) / temp, axis=-1)
  n = len(prompt)
  expected = [float(logp[n - 1 + i, t]) for i, t in enumerate(r.tokens)]
  np.testing.assert_allclose(r.logprobs, expected, atol=1e-5, rtol=0)
  if sampling.greedy:
    assert r.tokens == _recompute_greedy(PARAMS, prompt, 20)


def test_stop_tokens_and_max_new_tokens(gen):
  rng = np.random.default_rng(4)
  prompt = _prompt(rng, 6)
  full = gen.generate([GenerationRequest(prompt, 15, GREEDY)])[0].tokens
  stop = full[5]
  r = gen.generate([GenerationRequest(prompt, 15, GREEDY, stop_token_ids=(stop,))])[0]
  assert r.finish_reason == "stop" and r.tokens == full[: full.index(stop) + 1]
  # Stop strings: generation ends at the first token whose text completes the string.
  tok = ByteTokenizer()
  text = tok.decode(full)
  stop_str = text[len(text) // 2 : len(text) // 2 + 2]
  want = next(full[: i + 1] for i in range(len(full)) if stop_str in tok.decode(full[: i + 1]))
  g2 = Generator(gen.engine, tokenizer=tok)
  try:
    r2 = g2.generate([GenerationRequest(prompt, 15, GREEDY, stop_strings=(stop_str,))])[0]
  finally:
    g2.close()
  assert r2.tokens == want and r2.finish_reason == "stop_string"


def test_session_prefix_reuse_equals_fresh_prefill():
  eng = Engine(CFG, PARAMS, max_concurrent_decodes=4, page_size=8, max_seq_len=MAX_LEN)
  with Generator(eng) as gen:  # no shared-prefix cache: the session alone supplies the reuse
    rng = np.random.default_rng(5)
    turn1 = _prompt(rng, 21)
    r1 = gen.generate([GenerationRequest(turn1, 9, GREEDY, session_id="ep0")])[0]
    turn2 = turn1 + r1.tokens + _prompt(rng, 6)
    samp = SamplingParams(temperature=0.9, seed=11)
    r2 = gen.generate([GenerationRequest(turn2, 10, samp, session_id="ep0")])[0]
    assert r2.cached_prefix_len >= len(turn1) + len(r1.tokens) - 1
    assert gen.stats()["prefill_tokens"] == len(turn1) + len(turn2) - r2.cached_prefix_len
    fresh = gen.generate([GenerationRequest(turn2, 10, samp)])[0]
    assert fresh.cached_prefix_len == 0
    assert r2.tokens == fresh.tokens
    np.testing.assert_allclose(r2.logprobs, fresh.logprobs, atol=1e-5)
    # A third turn that rewrites history reuses only the common prefix, token-exactly.
    turn3 = turn1[:13] + _prompt(rng, 10)
    r3 = gen.generate([GenerationRequest(turn3, 6, GREEDY, session_id="ep0")])[0]
    assert r3.cached_prefix_len == 13
    assert r3.tokens == _recompute_greedy(PARAMS, turn3, 6)
    gen.release_session("ep0")
    _check_pool_empty(gen)


def test_shared_prefix_cache_across_requests(gen):
  rng = np.random.default_rng(6)
  system = _prompt(rng, 32)  # four full pages of 8
  a, b = system + _prompt(rng, 5), system + _prompt(rng, 3)
  ra = gen.generate([GenerationRequest(a, 5, GREEDY)])[0]
  rb = gen.generate([GenerationRequest(b, 5, GREEDY)])[0]
  assert rb.cached_prefix_len == 32
  # A session diverging inside a shared page re-prefills from that page's start instead of
  # overwriting a page other requests read.
  gen.generate([GenerationRequest(a, 3, GREEDY, session_id="x")])
  rc = gen.generate([GenerationRequest(system[:13] + [1, 2], 3, GREEDY, session_id="x")])[0]
  assert rc.cached_prefix_len == 8
  assert rc.tokens == _recompute_greedy(PARAMS, system[:13] + [1, 2], 3)
  gen.release_session("x")
  assert ra.tokens == _recompute_greedy(PARAMS, a, 5)
  assert rb.tokens == _recompute_greedy(PARAMS, b, 5)
  _check_pool_empty(gen)


def test_thousand_requests_leak_no_pages(gen):
  rng = np.random.default_rng(7)
  reqs = []
  for i in range(1000):
    sid = f"s{i % 5}" if i % 7 == 0 else None
    stop = (int(rng.integers(0, CFG.vocab_size)),) if i % 3 == 0 else ()
    samp = GREEDY if i % 2 else SamplingParams(temperature=1.0, seed=i)
    reqs.append(
      GenerationRequest(
        _prompt(rng, int(rng.integers(1, 12))), int(rng.integers(1, 6)), samp, stop, (), sid
      )
    )
  results = gen.generate(reqs)
  assert all(1 <= len(r.tokens) <= q.max_new_tokens for r, q in zip(results, reqs, strict=True))
  assert gen.stats()["sessions"] == 5
  _check_pool_empty(gen)


def test_bad_requests_get_clear_errors(gen):
  with pytest.raises(ValueError, match="empty"):
    gen.submit(GenerationRequest([], 4))
  with pytest.raises(ValueError, match="max_seq_len"):
    gen.submit(GenerationRequest([1] * MAX_LEN, 4))
  with pytest.raises(ValueError, match="stop_strings"):
    gen.submit(GenerationRequest([1], 4, stop_strings=("x",)))


def test_hot_swap_takes_effect_next_step_without_recompiling():
  eng = Engine(CFG, PARAMS, max_concurrent_decodes=4, page_size=8, max_seq_len=MAX_LEN)
  # Zeroing the final norm makes every logit 0: greedy picks token 0 with logprob -log V.
  swapped = dict(PARAMS, final_norm=jnp.zeros_like(PARAMS["final_norm"]))
  prompt = [5, 9, 2]
  state = eng.init_decode_state()
  padded = np.zeros(eng.bucket(3), np.int32)
  padded[:3] = prompt
  state = eng.insert(eng.prefill(padded_tokens=padded, true_length=3), state, 0, np.arange(1, 17))
  ref = _recompute_greedy(PARAMS, prompt, 4)
  state, out = eng.generate(decode_state=state)
  assert int(out.tokens_S[0]) == ref[1]
  before = dict(TRACES)
  eng.load_params(swapped, version=1)
  state, out = eng.generate(decode_state=state)
  assert int(out.tokens_S[0]) == 0
  np.testing.assert_allclose(float(out.logprobs_S[0]), -np.log(CFG.vocab_size), rtol=1e-6)
  assert eng.policy_version == 1 and dict(TRACES) == before

  with Generator(eng) as g:
    eng.load_params(PARAMS, version=2)
    fut = g.submit(GenerationRequest(prompt, 100, GREEDY))
    deadline = time.monotonic() + 60
    while g.stats()["tokens_generated"] < 5:  # swap mid-request, once decoding is under way
      assert time.monotonic() < deadline and not fut.done(), g.stats()
      time.sleep(0.001)
    g.load_params(swapped, version=3)
    r = fut.result()
  assert r.versions == sorted(r.versions) and set(r.versions) == {2, 3}
  k = r.versions.index(3)
  assert r.tokens[:k] == _recompute_greedy(PARAMS, prompt, k)
  assert set(r.tokens[k:]) == {0}
  with pytest.raises(ValueError, match="wq"):
    eng.load_params(dict(PARAMS, layers=dict(PARAMS["layers"], wq=PARAMS["layers"]["wq"][:, :1])))


def test_page_buckets_are_powers_of_two_and_equal_all_pages():
  """A decode step over the power-of-2 bucket of live pages gives the tokens and logprobs of the
  same step over every page."""
  eng = Engine(CFG, PARAMS, max_concurrent_decodes=2, page_size=8, max_seq_len=MAX_LEN)
  assert eng.page_buckets() == [1, 2, 4, 8, None]
  assert [eng.attention_pages(n) for n in (1, 8, 9, 17, 33, 64, 65)] == [1, 1, 2, 4, 8, 8, None]
  rng = np.random.default_rng(5)
  prompts = np.asarray([_prompt(rng, 20), _prompt(rng, 20)], np.int32)
  table = np.arange(1, 2 * eng.pages_per_slot + 1).reshape(2, -1)
  state = eng.set_page_table(eng.init_decode_state(), table)
  state = eng.insert(eng.prefill(padded_tokens=prompts, true_length=20), state, [0, 1], table)
  outs = {}
  for pages in (eng.attention_pages(21), None):
    st = jax.tree.map(jnp.copy, state)
    for _ in range(3):
      st, out = eng.generate(decode_state=st, pages=pages)
    outs[pages] = (np.asarray(out.tokens_S), np.asarray(out.logprobs_S))
  (tok_b, lp_b), (tok_all, lp_all) = outs.values()
  np.testing.assert_array_equal(tok_b, tok_all)
  np.testing.assert_allclose(lp_b, lp_all, rtol=1e-6, atol=1e-6)
