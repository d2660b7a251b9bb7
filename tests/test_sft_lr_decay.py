"""sft.end_lr_ratio: the warm start's lr decays by cosine from lr to lr * ratio (NumPy
reference of the schedule), and the knob reaches the warm start's optimizer (same demos,
same seed: ratio 1 and ratio 0 end on different weights)."""

import dataclasses

import jax
import numpy as np

from configs import toy
from models import transformer
from parallel.mesh import MeshConfig, make_mesh
from rl import warm_start
from rl.config import OptimConfig, to_experiment
from rl.runtime import multihost
from rl.train_state import lr_schedule


def test_schedule_matches_a_numpy_cosine_to_the_end_ratio():
  cfg = OptimConfig(lr=2e-3, warmup_steps=4, decay_steps=20, end_lr_ratio=0.25)
  f = lr_schedule(cfg)
  for s in range(0, 26):
    if s < 4:
      want = 2e-3 * s / 4
    else:
      t = min(s - 4, 16) / 16
      want = 2e-3 * (0.25 + 0.75 * 0.5 * (1 + np.cos(np.pi * t)))
    np.testing.assert_allclose(float(f(s)), want, rtol=1e-5, atol=1e-12)


def _warm_start(ratio: float, steps: int):
  c = toy.get_config()
  c.sft.steps, c.sft.batch_size, c.sft.warmup_steps, c.sft.log_every = steps, 2, 0, 100
  c.sft.end_lr_ratio = ratio
  exp = to_experiment(c)
  exp = dataclasses.replace(exp, train=dataclasses.replace(exp.train, mesh=MeshConfig(fsdp=1)))
  mesh = make_mesh(MeshConfig(fsdp=1), jax.devices()[:1])
  params = transformer.init(exp.model, jax.random.key(0))
  rng = np.random.default_rng(0)
  demos = []
  for _ in range(2):
    toks = rng.integers(1, exp.model.vocab_size, 24).tolist()
    demos.append(
      dict(tokens=toks, loss_mask=[0] * 8 + [1] * 16, behaviour_logprobs=[0.0] * 24, reward=1.0)
    )
  state = warm_start.warm_start(exp, exp.model, mesh, params, demos, None, 0, multihost.Local())
  return jax.tree.leaves(state.params)


def test_end_lr_ratio_reaches_the_warm_start():
  # same demos and seed; ratio 0 decays the lr over the 3 steps, ratio 1 keeps it
  a, b = _warm_start(1.0, 3), _warm_start(0.0, 3)
  assert len(a) == len(b) and any(
    not np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b, strict=True)
  )
