"""Train-inference mismatch in fp32: the real engine's behaviour log-probs equal the update step's.

The tokens are sampled by models.inference.generator.Generator over models.inference.engine.Engine (paged KV cache,
prefill + decode), packed by rl.packing and scored by the jitted rl.train_step update, whose
`mismatch*` metrics (rl.losses.mismatch) are what every RL step logs as `train/mismatch_*`.
"""

import jax
import numpy as np
import sampled

from models import transformer
from models.config import tiny
from models.inference.engine import Engine
from parallel.mesh import single_device_mesh
from rl.config import LossConfig, OptimConfig, TrainConfig
from rl.packing import pack
from rl.train_state import create_train_state
from rl.train_step import make_train_step

CFG = tiny(
  "qwen3", vocab_size=96, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64, max_seq_len=64
)
FAST = {"xla_backend_optimization_level": 0}


def _sample(params, n=8):
  """n sampled completions (temperature 1, own seed each) of random prompts: trajectories."""
  engine = Engine(CFG, params, max_concurrent_decodes=4, max_seq_len=64)
  trajs = []
  for i, (p, r) in enumerate(sampled.sample(engine, CFG.vocab_size, n)):
    assert r.finish_reason == "length" and len(r.tokens) == 12
    tokens = np.asarray(p + r.tokens, np.int32)
    # Entry t scores tokens[t]: the prompt carries no behaviour log-prob and no loss.
    behave = np.concatenate([np.zeros(len(p)), np.asarray(r.logprobs)]).astype(np.float32)
    mask = np.concatenate([np.zeros(len(p)), np.ones(len(r.tokens))]).astype(np.float32)
    trajs.append(
      dict(tokens=tokens, loss_mask=mask, behaviour_logprobs=behave, reward=float(i % 2),
           group_id=i // 4)
    )  # fmt: skip
  return trajs


def test_fp32_engine_and_update_step_log_probs_agree_within_1e5():
  cfg = TrainConfig(loss=LossConfig(kl="none"), optim=OptimConfig(lr=1e-3, warmup_steps=0))
  mesh = single_device_mesh()
  params = transformer.init(CFG, jax.random.key(1))
  trajs = _sample(params)
  batch, _ = pack(trajs, 32, max_segments=2, row_multiple=4)
  state, shardings = create_train_state(CFG, cfg, mesh, jax.random.key(0), params=params)
  step = make_train_step(CFG, cfg, mesh, shardings, batch, compiler_options=FAST)
  state, m = step(state, batch)
  n_policy = sum(int(t["loss_mask"].sum()) for t in trajs)
  assert float(m["n_tokens"]) == n_policy == 8 * 12
  assert float(m["mismatch_max"]) <= 1e-5, float(m["mismatch_max"])
  assert 0.0 <= float(m["mismatch_mean"]) <= float(m["mismatch_max"])
  assert abs(float(m["mismatch_kl"])) <= 1e-9
  # The probe can fail: after the update the trainer's policy differs from the behaviour one.
  _, m2 = step(state, batch)
  assert float(m2["mismatch_max"]) > 1e-3


def _engine(params):
  return Engine(CFG, params, max_concurrent_decodes=4, max_seq_len=64)


def test_tempered_sampling_engine_and_update_step_agree():
  """The engine samples from softmax(z / 0.7) and a step made with temperature=0.7 scores
  logits / 0.7, so behaviour and trainer log-probs agree in fp32; the same tokens scored at
  temperature 1 do not (the check can fail)."""
  mesh = single_device_mesh()
  params = transformer.init(CFG, jax.random.key(2))
  trajs = []
  for i, (p, r) in enumerate(sampled.sample(_engine(params), 96, 8, temperature=0.7)):
    trajs.append(
      dict(tokens=np.asarray(p + r.tokens, np.int32), reward=float(i % 2), group_id=i // 4,
           behaviour_logprobs=np.r_[np.zeros(len(p)), r.logprobs].astype(np.float32),
           loss_mask=np.r_[np.zeros(len(p)), np.ones(len(r.tokens))].astype(np.float32))
    )  # fmt: skip
  batch, _ = pack(trajs, 32, max_segments=2, row_multiple=4)
  for temp, close in ((0.7, True), (1.0, False)):
    cfg = TrainConfig(loss=LossConfig(kl="none"), optim=OptimConfig(lr=0.0))
    state, shardings = create_train_state(CFG, cfg, mesh, jax.random.key(0), params=params)
    step = make_train_step(CFG, cfg, mesh, shardings, batch, FAST, temperature=temp)
    _, m = step(state, batch)
    assert (float(m["mismatch_max"]) <= 1e-5) == close, (temp, float(m["mismatch_max"]))


def test_tempered_log_probs_equal_a_numpy_reference():
  from rl.train_step import forward_logprobs

  params = transformer.init(CFG, jax.random.key(3))
  tok_BT = np.random.default_rng(0).integers(0, 96, (2, 10)).astype(np.int32)
  batch = {
    "tokens_BT": tok_BT, "positions_BT": np.tile(np.arange(10, dtype=np.int32), (2, 1)),
    "segment_ids_BT": np.ones((2, 10), np.int32),
  }  # fmt: skip
  logits = np.asarray(transformer.apply(params, tok_BT, CFG), np.float64) / 0.5
  logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  want = np.take_along_axis(logits[:, :-1], tok_BT[:, 1:, None], -1)[..., 0] - logz[:, :-1]
  p = np.exp(logits - logz[..., None])
  want_ent = -(p * (logits - logz[..., None])).sum(-1)
  logp, ent, _ = forward_logprobs(params, batch, CFG, True, temperature=0.5)
  np.testing.assert_allclose(np.asarray(logp)[:, 1:], want, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ent)[:, 1:], want_ent[:, :-1], atol=1e-5)
