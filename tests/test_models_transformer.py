"""models.transformer / rope / moe: formulas, equivalences, remat, scan, sharding."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import config as mconfig
from models import moe, rope, transformer
from models.attention import attend
from models.config import RopeScaling

AXIS_NAMES = {
  "batch",
  "length",
  "embed",
  "heads",
  "kv_heads",
  "head_dim",
  "mlp",
  "vocab",
  "experts",
  "layers",
}


# ------------------------------------------------------------------ RoPE


def _np_inv_freq(kind, d, theta, max_len, seq_len=None, **kw):
  """Each variant written out per frequency from its published formula."""
  out, att = [], 1.0
  factor = kw.get("factor", 1.0)
  for i in range(0, d, 2):
    f = theta ** (-i / d)
    if kind == "linear":
      f = f / factor
    elif kind == "dynamic":
      L = max(seq_len, max_len)
      base = theta * (factor * L / max_len - (factor - 1)) ** (d / (d - 2))
      f = base ** (-i / d)
    elif kind == "llama3":
      orig, lo, hi = (
        kw["original_max_position_embeddings"],
        kw["low_freq_factor"],
        kw["high_freq_factor"],
      )
      wav = 2 * math.pi / f
      if wav > orig / lo:
        f = f / factor
      elif wav >= orig / hi:
        s = (orig / wav - lo) / (hi - lo)
        f = (1 - s) * f / factor + s * f
    elif kind == "yarn":
      orig = kw["original_max_position_embeddings"]
      lo = max(math.floor(d * math.log(orig / (32 * 2 * math.pi)) / (2 * math.log(theta))), 0)
      hi = min(math.ceil(d * math.log(orig / (1 * 2 * math.pi)) / (2 * math.log(theta))), d - 1)
      ramp = min(max((i // 2 - lo) / (hi - lo), 0.0), 1.0)
      f = (f / factor) * ramp + f * (1 - ramp)
      att = 0.1 * math.log(factor) + 1
    out.append(f)
  return np.array(out), att


@pytest.mark.parametrize(
  "kind,kw,seq_len",
  [
    ("none", {}, None),
    ("linear", dict(factor=4.0), None),
    ("dynamic", dict(factor=2.0), 3000),
    ("dynamic", dict(factor=2.0), 100),
    (
      "llama3",
      dict(
        factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=256
      ),
      None,
    ),
    ("yarn", dict(factor=4.0, original_max_position_embeddings=256), None),
  ],
)
def test_rope_inv_freq_matches_formula(kind, kw, seq_len):
  cfg = mconfig.tiny(
    "llama",
    head_dim=32,
    max_seq_len=1024,
    rope_theta=10000.0,
    rope_scaling=RopeScaling(kind=kind, **kw),
  )
  inv, att = rope.inv_freq(cfg, None if seq_len is None else jnp.int32(seq_len))
  want, want_att = _np_inv_freq(kind, 32, 10000.0, 1024, seq_len, **kw)
  np.testing.assert_allclose(np.asarray(inv), want, rtol=2e-6)
  assert att == pytest.approx(want_att)
  if kind == "llama3":  # the three regimes really occur
    ratio = want / _np_inv_freq("none", 32, 10000.0, 1024)[0]
    assert ratio.max() == pytest.approx(1) and ratio.min() == pytest.approx(1 / 8)
    assert np.any((ratio > 1 / 8 + 1e-3) & (ratio < 1 - 1e-3))


def test_rope_rotation_hand_case_and_scaling():
  cfg = mconfig.tiny("llama", head_dim=2, n_heads=1, n_kv_heads=1)  # one frequency: 1.0
  x = jnp.array([1.0, 2.0]).reshape(1, 1, 1, 2)
  cos, sin = rope.cos_sin(jnp.array([[3]]), cfg)
  c, s = math.cos(3.0), math.sin(3.0)
  np.testing.assert_allclose(
    np.asarray(rope.apply_rope(x, cos, sin)).ravel(), [c - 2 * s, 2 * c + s], rtol=1e-6
  )
  cos0, sin0 = rope.cos_sin(jnp.array([[0]]), cfg)
  np.testing.assert_allclose(np.asarray(rope.apply_rope(x, cos0, sin0)), np.asarray(x))
  yarn = cfg.replace(
    rope_scaling=RopeScaling("yarn", factor=4.0, original_max_position_embeddings=64)
  )
  cos_y, _ = rope.cos_sin(jnp.array([[0]]), yarn)  # YaRN folds its attention factor into cos/sin
  np.testing.assert_allclose(np.asarray(cos_y).ravel(), [0.1 * math.log(4) + 1] * 2, rtol=1e-6)


# ------------------------------------------------------------------ MoE


def _np_moe(x, lp, k, norm):
  x = np.asarray(x, np.float64).reshape(-1, x.shape[-1])
  out = np.zeros_like(x)
  silu = lambda a: a / (1 + np.exp(-a))
  for n in range(x.shape[0]):
    logits = x[n] @ np.asarray(lp["router"])
    p = np.exp(logits - logits.max())
    p /= p.sum()
    top = np.argsort(-p)[:k]
    gates = p[top] / (p[top].sum() if norm else 1.0)
    for g, e in zip(gates, top, strict=True):
      h = silu(x[n] @ np.asarray(lp["we_gate"][e])) * (x[n] @ np.asarray(lp["we_up"][e]))
      out[n] += g * (h @ np.asarray(lp["we_down"][e]))
  return out


@pytest.mark.parametrize("norm", [True, False])
def test_moe_matches_numpy_loop(norm):
  cfg = mconfig.tiny(
    "qwen3_moe", d_model=16, n_experts=5, n_experts_per_tok=2, moe_d_ff=8, norm_topk_prob=norm
  )
  lp = jax.tree.map(lambda a: a[0], transformer.init(cfg, jax.random.PRNGKey(0))["layers"])
  lp = {k: v * 20 for k, v in lp.items()}  # sharper routing than the 0.02 init gives
  x = jax.random.normal(jax.random.PRNGKey(1), (2, 7, 16))
  y, _ = jax.jit(moe.moe_mlp, static_argnums=2)(x, lp, cfg)
  np.testing.assert_allclose(
    np.asarray(y).reshape(14, 16), _np_moe(x, lp, 2, norm), rtol=1e-4, atol=1e-5
  )


def test_routing_hand_case_and_aux_loss():
  # probs (1/6, 2/6, 3/6): top-2 = experts (2, 1), renormalised gates (0.6, 0.4).
  router = jnp.array([[0.0, math.log(2), math.log(3)]])
  gates, experts, probs = moe.route(jnp.ones((1, 1)), router, 2, True)
  np.testing.assert_allclose(np.asarray(gates), [[0.6, 0.4]], rtol=1e-6)
  assert experts.tolist() == [[2, 1]]
  # Two valid tokens both routed to (2, 1) and one padding token that must not count.
  ex = jnp.array([[2, 1], [2, 1], [0, 1]])
  pr = jnp.array([[1, 2, 3], [1, 2, 3], [9, 0, 0]], jnp.float32) / jnp.array([6, 6, 9.0])[:, None]
  stats = moe.balance_stats(ex, pr, jnp.array([True, True, False]))
  f, P = np.array([0, 1, 1.0]), np.array([1, 2, 3]) / 6  # fraction routed, mean prob
  assert float(moe.aux_loss(stats)) == pytest.approx(3 * float(np.sum(f * P)))


# ------------------------------------------------------------------ full model


def _ce_loss(params, tokens, cfg):
  logits = transformer.apply(params, tokens[:, :-1], cfg)
  logp = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))


def test_remat_policies_give_equal_gradients():
  cfg = mconfig.tiny("qwen3", attn_bias=True, attn_out_bias=True)
  params = transformer.init(cfg, jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 17), 0, cfg.vocab_size)
  grads = {}
  for remat in ("none", "full", "save_dots"):
    c = cfg.replace(remat=remat)
    grads[remat] = jax.jit(jax.grad(_ce_loss), static_argnums=2)(params, tokens, c)
  for remat in ("full", "save_dots"):
    for a, b in zip(jax.tree.leaves(grads["none"]), jax.tree.leaves(grads[remat]), strict=True):
      np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-7, rtol=1e-5)


def test_unrolled_layer_scan_gives_equal_gradients_and_drops_the_loop():
  cfg = mconfig.tiny("qwen3", n_layers=4)
  params = transformer.init(cfg, jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 17), 0, cfg.vocab_size)
  grad = jax.jit(jax.grad(_ce_loss), static_argnums=2)
  want = grad(params, tokens, cfg)
  for unroll in (2, 4, 9):  # two per iteration, all, more than there are (= all)
    c = cfg.replace(scan_unroll=unroll)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(grad(params, tokens, c)), strict=True):
      np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-7, rtol=1e-5)
  whiles = lambda c: grad.lower(params, tokens, c).as_text().count("stablehlo.while")
  assert whiles(cfg) > whiles(cfg.replace(scan_unroll=4)) == whiles(cfg.replace(scan_unroll=9))
  with pytest.raises(ValueError, match="scan_unroll"):
    cfg.replace(scan_unroll=0)


def test_scan_keeps_program_size_independent_of_depth():
  sizes = []
  for n_layers in (2, 16):
    cfg = mconfig.tiny("qwen3", n_layers=n_layers)
    params = jax.eval_shape(lambda k, c=cfg: transformer.init(c, k), jax.random.PRNGKey(0))
    tokens = jax.ShapeDtypeStruct((2, 8), jnp.int32)
    grad = jax.jit(jax.grad(_ce_loss), static_argnums=2)
    sizes.append(len(grad.lower(params, tokens, cfg).as_text().splitlines()))
  assert sizes[1] == sizes[0]


def test_packed_sequences_equal_separate_ones():
  cfg = mconfig.tiny("qwen3", attn_chunk=4)
  params = transformer.init(cfg, jax.random.PRNGKey(0))
  a, b = np.arange(5) + 10, np.arange(4) + 40
  packed = np.concatenate([a, b, [0]])[None]
  seg = np.array([[1] * 5 + [2] * 4 + [0]])
  pos = np.array([list(range(5)) + list(range(4)) + [0]])
  apply = jax.jit(transformer.apply, static_argnums=2)
  got = np.asarray(apply(params, packed, cfg, positions_BT=pos, segment_ids_BT=seg))
  np.testing.assert_allclose(got[0, :5], np.asarray(apply(params, a[None], cfg))[0], atol=1e-5)
  np.testing.assert_allclose(got[0, 5:9], np.asarray(apply(params, b[None], cfg))[0], atol=1e-5)


@functools.partial(jax.jit, static_argnums=4)
def _cached_step(params, tokens_BN, pos_N, cache, cfg):
  """Runs N new tokens at positions pos_N against a fixed-size KV cache.

  Empty cache slots carry segment 0, the attention convention for padding.
  """
  B, N = tokens_BN.shape
  S = cache["seg_BS"].shape[1]
  seg_BS = cache["seg_BS"].at[:, pos_N].set(1)
  pos_BN = jnp.broadcast_to(pos_N, (B, N))
  x = transformer.embed(params, tokens_BN, cfg)
  ks, vs = [], []
  for i in range(cfg.n_layers):
    lp = jax.tree.map(lambda a, i=i: a[i], params["layers"])
    q, k, v = transformer.layer_qkv(lp, x, pos_BN, cfg)
    ks.append(cache["k"][i].at[:, pos_N].set(k))
    vs.append(cache["v"][i].at[:, pos_N].set(v))
    attn = attend(
      q,
      ks[i],
      vs[i],
      q_pos_BT=pos_BN,
      k_pos_BS=jnp.arange(S)[None],
      q_seg_BT=jnp.ones((B, N), jnp.int32),
      k_seg_BS=seg_BS,
      chunk=4,
    )
    x, _ = transformer.layer_finish(lp, x, attn, cfg)
  logits = transformer.unembed(params, x, cfg)
  return logits, {"k": jnp.stack(ks), "v": jnp.stack(vs), "seg_BS": seg_BS}


def test_cached_decoding_with_the_pieces_equals_apply():
  cfg = mconfig.tiny("qwen3_moe", attn_bias=True, attn_out_bias=True)
  params = transformer.init(cfg, jax.random.PRNGKey(2))
  B, T, n_prompt = 2, 8, 6
  tokens = jax.random.randint(jax.random.PRNGKey(3), (B, T), 0, cfg.vocab_size)
  want = jax.jit(transformer.apply, static_argnums=2)(params, tokens, cfg)
  kv = jnp.zeros((cfg.n_layers, B, T, cfg.n_kv_heads, cfg.head_dim))
  cache = {"k": kv, "v": kv, "seg_BS": jnp.zeros((B, T), jnp.int32)}
  outs = []
  for start, stop in [(0, n_prompt)] + [(t, t + 1) for t in range(n_prompt, T)]:
    logits, cache = _cached_step(params, tokens[:, start:stop], jnp.arange(start, stop), cache, cfg)
    outs.append(logits)
  np.testing.assert_allclose(np.asarray(jnp.concatenate(outs, 1)), np.asarray(want), atol=1e-5)


def test_param_axes_cover_every_weight():
  for arch in mconfig.ARCHS:
    cfg = mconfig.tiny(arch, attn_bias=True, attn_out_bias=True)
    shapes = transformer.param_shapes(cfg)
    axes = transformer.param_axes(cfg)
    params = jax.eval_shape(lambda k, c=cfg: transformer.init(c, k), jax.random.PRNGKey(0))
    leaf = lambda x: isinstance(x, tuple)
    assert jax.tree.structure(axes, is_leaf=leaf) == jax.tree.structure(params)
    for ax, sh, p in zip(
      jax.tree.leaves(axes, is_leaf=leaf),
      jax.tree.leaves(shapes, is_leaf=leaf),
      jax.tree.leaves(params),
      strict=True,
    ):
      assert len(ax) == len(sh) == p.ndim and set(ax) <= AXIS_NAMES
    assert mconfig.num_params(cfg) == sum(math.prod(p.shape) for p in jax.tree.leaves(params))


def test_sharded_apply_on_8_devices_equals_single_device():
  from parallel import mesh as pmesh
  from parallel import rules, sharding

  cfg = mconfig.tiny("qwen3_moe", attn_chunk=4)
  params = transformer.init(cfg, jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (4, 8), 0, cfg.vocab_size)
  want = jax.jit(transformer.apply, static_argnums=2)(params, tokens, cfg)
  mesh = pmesh.make_mesh(pmesh.MeshConfig(data=2, fsdp=2, tensor=2))
  shard = sharding.param_shardings(transformer.param_axes(cfg), params, mesh)
  with rules.use_mesh_rules(mesh):
    got = jax.jit(transformer.apply, static_argnums=2)(jax.device_put(params, shard), tokens, cfg)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_bf16_compute_with_fp32_params():
  cfg = mconfig.tiny("qwen3")
  params = transformer.init(cfg, jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 8), 0, cfg.vocab_size)
  apply = jax.jit(transformer.apply, static_argnums=2)
  ref = apply(params, tokens, cfg)
  out = apply(params, tokens, cfg.replace(dtype="bfloat16"))
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-2)
  grad = jax.jit(jax.grad(_ce_loss), static_argnums=2)
  g = grad(params, tokens, cfg.replace(dtype="bfloat16", remat="save_dots"))
  assert all(x.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g))
