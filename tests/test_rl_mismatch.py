"""Train-inference mismatch in fp32: the real engine's behaviour log-probs equal the update step's.

The tokens are sampled by models.generator.Generator over models.engine.Engine (paged KV cache,
prefill + decode), packed by rl.packing and scored by the jitted rl.train_step update, whose
`mismatch*` metrics (rl.losses.mismatch) are what every RL step logs as `train/mismatch_*`.
"""

import jax
import numpy as np
import sampled

from models import transformer
from models.config import tiny
from models.engine import Engine
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
