"""models.shared_prefix == transformer.apply on the full rows: logits, picked logits, gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import shared_prefix, transformer
from models.config import tiny

CFG = tiny("qwen3", vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)


def grouped_rows(rows=6, group=3, length=20, prefix=7, seed=0):
  """Rows in groups sharing their first `prefix` tokens; the last row of each group is two
  packed sequences after the prompt (segments 1, 2) and ends in padding (segment 0)."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, 64, (rows, length)).astype(np.int32)
  tokens[:, :prefix] = np.repeat(tokens[::group, :prefix], group, axis=0)
  seg = np.ones((rows, length), np.int32)
  pos = np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy()
  last = np.arange(group - 1, rows, group)
  seg[last, 12:] = 2
  pos[last, 12:] = np.arange(length - 12)
  seg[last, 17:] = 0
  return tokens, pos, seg


@pytest.mark.parametrize("remat", ["none", "full"])
def test_shared_prefix_equals_full_rows(remat):
  cfg = CFG.replace(remat=remat, attn_chunk=8)  # several attention chunks
  params = transformer.init(cfg, jax.random.key(0))
  tokens, pos, seg = grouped_rows()
  kw = dict(positions_BT=pos, segment_ids_BT=seg)
  naive = cfg.replace(attention="naive")
  full = np.asarray(transformer.apply(params, tokens, naive, **kw))
  got = np.asarray(shared_prefix.apply(params, tokens, cfg, 3, 7, **kw))
  live = seg > 0  # padding attends to nothing: its logits are undefined in both
  np.testing.assert_allclose(got[live], full[live], rtol=1e-5, atol=1e-5)
  idx = np.array([[0, 6, 7, 19]] * 6, np.int32)
  picked = shared_prefix.apply(params, tokens, cfg, 3, 7, logit_index_BN=idx, **kw)
  np.testing.assert_allclose(np.asarray(picked), np.take_along_axis(got, idx[..., None], 1))

  def loss(p, fn):
    logits = fn(p)
    return jnp.sum(jnp.where(live[..., None], jnp.sin(logits), 0.0))

  g_full = jax.grad(loss)(params, lambda p: transformer.apply(p, tokens, naive, **kw))
  g_got = jax.grad(loss)(params, lambda p: shared_prefix.apply(p, tokens, cfg, 3, 7, **kw))
  for a, b in zip(jax.tree.leaves(g_got), jax.tree.leaves(g_full), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_shared_prefix_rejects_what_it_cannot_share():
  params = transformer.init(CFG, jax.random.key(0))
  tokens, _, _ = grouped_rows()
  with pytest.raises(ValueError, match="no groups of 4"):
    shared_prefix.apply(params, tokens, CFG, 4, 7)
  with pytest.raises(ValueError, match="dense model"):
    shared_prefix.apply(params, tokens, CFG.replace(n_experts=4, moe_d_ff=16), 3, 7)
