"""The update step's layouts on the real SmolLM2-135M-Instruct (30 layers, vocab 49152).

The small-model tests (test_rl_train_step.py) prove that the shared-prefix layout and the
loss-only LM head compute what the plain layout does; this checks the same at real depth and
vocabulary on one GRPO batch. The loss-only head changes no arithmetic: gradients equal the
plain ones element-wise. The shared prefix runs the prompt's attention apart and merges it,
a different fp32 rounding, which 30 layers amplify: measured against the plain layout in
float64 (a one-off x64 probe, 2026-12-04), the plain fp32 gradients are off by 4.5e-5 and the
shared-prefix fp32 ones by 4.9e-5 (norm-wise), so its gradients are compared norm-wise per
leaf against 1e-4, the fp32 floor at this depth; losses and metrics element-wise.
"""

import jax
import numpy as np
import pytest
from train_step_setup import assert_trees_close, grpo_batch

from models.io import hf
from rl.config import LossConfig, TrainConfig
from rl.layout import Layout, plan
from rl.train_step import compute_grads

NAME = "smollm2-135m-instruct"
FAST = {"xla_backend_optimization_level": 0}


@pytest.fixture(scope="module")
def smol():
  return hf.load(NAME)


def test_shared_prefix_and_loss_only_head_equal_plain_at_135m(smol):
  cfg, params = smol
  assert cfg.n_layers == 30 and cfg.vocab_size == 49152
  # 2 prompts x 2 completions: 32-token prompts shared inside each group, 32 new tokens.
  batch = grpo_batch(prompts=2, group=2, prompt_len=32, new=32, seed=3, vocab=cfg.vocab_size)
  loss = LossConfig(kl="k3", kl_coef=0.05, compute_entropy=True, entropy_coef=0.01)
  tcfg = TrainConfig(loss=loss, micro_batches=1)
  layout = plan(batch, tcfg, cfg, block_rows=4)
  assert layout.n_logits is not None and layout.n_logits < 64 and layout.prefix >= 16, layout
  ref = jax.tree.map(lambda x: x * 0.999, params)  # a reference that differs: KL > 0

  def grads(lay):
    fn = jax.jit(lambda p, r, b: compute_grads(p, r, b, cfg, tcfg, lay), compiler_options=FAST)
    return fn(params, ref, batch)

  g0, l0, m0 = grads(Layout())
  g_head, l_head, m_head = grads(Layout(layout.n_logits))
  g1, l1, m1 = grads(layout)
  assert float(m0["kl"]) > 0 and float(m0["entropy"]) > 0
  for loss_, met in ((l_head, m_head), (l1, m1)):
    np.testing.assert_allclose(float(loss_), float(l0), rtol=1e-5)
    assert_trees_close(met, m0, rtol=1e-5, atol=1e-6)
  assert_trees_close(g_head, g0, rtol=1e-4, atol=1e-7)
  for path, a, b in zip(
    jax.tree_util.tree_leaves_with_path(g0), jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True
  ):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    rel = np.linalg.norm(b - a) / np.linalg.norm(a)
    assert rel <= 1e-4, (jax.tree_util.keystr(path[0]), rel)
  # Not trivially zero: the gradient reaches the embedding through 30 layers.
  assert float(np.abs(np.asarray(g0["embed"])).max()) > 0
