"""Shared set-up of the jitted-update tests (test_rl_train_step.py, test_rl_lora_step.py): a
tiny dense model, random GRPO trajectories, and a helper that runs the compiled step."""

import jax
import numpy as np

from models.config import tiny
from rl.config import OptimConfig
from rl.packing import pack
from rl.train_state import create_train_state
from rl.train_step import make_train_step

DENSE = tiny("qwen3", vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)
# Adam's eps large enough that the first update is a smooth function of the gradient (with
# eps ~ 0 it is lr * sign(g) and rounding-level gradient noise could flip a sign).
OPT = OptimConfig(lr=1e-2, warmup_steps=0, decay_steps=10, eps=1e-3, weight_decay=0.01)
# XLA's backend optimisation does not change what is computed; off, CPU compiles take half.
FAST = {"xla_backend_optimization_level": 0}


def trajectories(n=16, group=4, seed=0, vocab=64):
  """Random trajectories (rewards vary inside each group of `group`)."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    length = int(rng.integers(6, 20))
    mask = np.zeros(length, np.float32)
    mask[int(rng.integers(2, length - 1)) :] = 1
    out.append(
      dict(
        tokens=rng.integers(1, vocab, length),
        loss_mask=mask,
        behaviour_logprobs=(-rng.random(length) * 3).astype(np.float32),
        reward=float(rng.integers(0, 2) + rng.random() * 0.1),
        group_id=i // group,
        truncated=bool(i % 5 == 0),
      )
    )
  return out


def batch_of(trajs, max_segments=4, rows=8):
  return pack(trajs, 32, max_segments=max_segments, row_multiple=rows)[0]


def run_steps(model_cfg, cfg, mesh, batch, n=2):
  """n compiled steps from a fresh state: (state, each step's metrics, losses, the step)."""
  state, shardings = create_train_state(model_cfg, cfg, mesh, jax.random.key(0))
  step = make_train_step(model_cfg, cfg, mesh, shardings, batch, compiler_options=FAST)
  metrics = []
  for _ in range(n):
    state, m = step(state, batch)
    metrics.append(jax.device_get(m))
  return state, metrics, [float(m["loss"]) for m in metrics], step


def assert_trees_close(a, b, rtol, atol):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def grpo_batch(prompts=4, group=4, prompt_len=18, new=14, seed=7, vocab=64):
  """Single-turn GRPO rows, one sequence each: G consecutive rows per prompt; every third
  completion stops early (padding after it)."""
  rng = np.random.default_rng(seed)
  trajs = []
  for i in range(prompts):
    prompt = rng.integers(1, vocab, prompt_len)
    for _ in range(group):
      tokens = np.concatenate([prompt, rng.integers(1, vocab, new)])
      trajs.append(
        dict(
          tokens=tokens,
          loss_mask=np.r_[np.zeros(prompt_len), np.ones(new)].astype(np.float32),
          behaviour_logprobs=(-rng.random(len(tokens)) * 3).astype(np.float32),
          reward=float(rng.integers(0, 2)),
          group_id=i,
        )
      )
  batch = pack(trajs, prompt_len + new, max_segments=1)[0]
  for r in range(0, prompts * group, 3):
    stop = int(rng.integers(prompt_len + 2, prompt_len + new))
    for k in ("tokens_BT", "positions_BT", "segment_ids_BT", "loss_mask_BT"):
      batch[k][r, stop:] = 0
  return batch
