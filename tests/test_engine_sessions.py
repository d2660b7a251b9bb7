"""Concurrent multi-turn sessions: every sampled token's log-prob equals a teacher-forced
forward over the whole conversation, with chunked decoding running past stops.

Regression for a race found by the eval's mismatch probe on the real model: on the CPU
backend JAX reads a NumPy array handed to it asynchronously, and the generator mutates its
host page table in place, so a dispatched step could see a later table and write K/V into a
page another session had just been given (the next turn then disagreed with the trainer by up
to 14 nats). models.inference.engine.to_device hands JAX a private copy.
"""

import concurrent.futures

import jax
import jax.numpy as jnp
import numpy as np

from models import config
from models import transformer as tfm
from models.inference.engine import Engine
from models.inference.generator import GenerationRequest, Generator
from models.sampling import SamplingParams

MAX_LEN, SLOTS, TEMP = 256, 8, 0.7


def _model():
  cfg = config.tiny("qwen3", max_seq_len=MAX_LEN)
  params = tfm.init(cfg, jax.random.PRNGKey(0))
  layers = jax.tree.map(lambda a: a * 10.0 if a.ndim >= 3 else a, params["layers"])
  return cfg, dict(params, embed=params["embed"] * 3.0, layers=layers)


def test_page_table_updates_do_not_race_host_mutations():
  """The generator updates its page table while decode steps are still queued: the transfer
  then waits behind them, and a host table mutated meanwhile must not leak into the update."""
  cfg, params = _model()
  eng = Engine(cfg, params, max_concurrent_decodes=SLOTS, max_seq_len=MAX_LEN, page_size=8)
  state = eng.init_decode_state()
  table = np.zeros((SLOTS, eng.pages_per_slot), np.int32)
  busy = jax.jit(lambda x: (x @ x) @ x)
  x = jnp.ones((512, 512))
  for i in range(50):  # before the fix about a third of these read the mutated table
    queued = busy(x)  # dispatched, not finished
    table[:] = i
    got = eng.set_page_table(state, table).page_table_SM
    table[:] = -1
    assert int(jnp.min(got)) == int(jnp.max(got)) == i
    queued.block_until_ready()


def test_concurrent_sessions_log_probs_equal_teacher_forced():
  cfg, params = _model()
  eng = Engine(cfg, params, max_concurrent_decodes=SLOTS, page_size=16, max_seq_len=MAX_LEN)
  gen = Generator(eng, decode_chunk=8)

  def episode(i):
    """4 turns: the context grows by the reply (ending at a stop token or the length) and an
    'observation' of random tokens; the session reuses the cached K/V."""
    rng = np.random.default_rng(100 + i)
    ctx, turns = rng.integers(0, cfg.vocab_size, 40 + i).tolist(), []
    for turn in range(4):
      stop = tuple(rng.integers(0, cfg.vocab_size, 2).tolist())
      samp = SamplingParams(temperature=TEMP, seed=1000 * i + turn)
      req = GenerationRequest(ctx, int(rng.integers(5, 30)), samp, stop_token_ids=stop,
                              session_id=f"s{i}")  # fmt: skip
      r = gen.submit(req).result()
      turns.append((len(ctx), r.tokens, r.logprobs, r.finish_reason))
      ctx = ctx + r.tokens + rng.integers(0, cfg.vocab_size, int(rng.integers(1, 12))).tolist()
    return ctx, turns

  try:
    with concurrent.futures.ThreadPoolExecutor(2 * SLOTS) as pool:
      episodes = list(pool.map(episode, range(3 * SLOTS)))
  finally:
    gen.close()
  apply = jax.jit(lambda t: tfm.apply(params, t, cfg))
  for ctx, turns in episodes:
    padded = np.zeros((1, MAX_LEN), np.int32)
    padded[0, : len(ctx)] = ctx
    logp = np.asarray(jax.nn.log_softmax(apply(jnp.asarray(padded))[0] / TEMP, axis=-1))
    for n, toks, lps, _ in turns:
      want = [float(logp[n - 1 + j, t]) for j, t in enumerate(toks)]
      np.testing.assert_allclose(lps, want, atol=1e-5, rtol=0)
  reasons = [t[3] for _, turns in episodes for t in turns]
  assert len(reasons) == 96 and reasons.count("stop") >= 5, reasons  # decoding ran past stops
