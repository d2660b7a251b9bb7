"""Ring attention (parallel.ring_attention) against full attention on 8 fake devices.

References: a float64 NumPy loop (forward), `models.attention` naive attention and its
autodiff (gradients), a hand-computed case, the whole transformer run in zig-zag layout
with ring attention against `transformer.apply`, and `ModelConfig(attention="ring")` on a
sequence mesh (logits and loss gradient) against attention="naive" on one device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import attention, transformer
from models.config import tiny
from parallel import ring_attention as ra
from parallel import zigzag as zz
from parallel.mesh import MeshConfig, make_mesh

TOL = dict(rtol=1e-5, atol=1e-5)  # fp32 against fp32/fp64 references


def _loop_reference(q, k, v, pos, seg, causal):
  """Deliberately naive: one query row at a time, float64."""
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  b_, t_, h_, d = q.shape
  g = h_ // k.shape[2]
  out = np.zeros_like(q)
  for b in range(b_):
    for h in range(h_):
      for t in range(t_):
        keys = [
          s
          for s in range(t_)
          if seg[b, s] != 0 and seg[b, s] == seg[b, t] and (not causal or pos[b, s] <= pos[b, t])
        ]
        if not keys:
          continue
        sc = np.array([q[b, t, h] @ k[b, s, h // g] for s in keys]) / np.sqrt(d)
        p = np.exp(sc - sc.max())
        out[b, t, h] = (p / p.sum()) @ v[b, keys, h // g]
  return out


def _inputs(b=2, t=64, h=4, kh=2, d=8, seed=0):
  rng = np.random.default_rng(seed)
  q, do = (rng.standard_normal((b, t, h, d)).astype(np.float32) for _ in range(2))
  k, v = (rng.standard_normal((b, t, kh, d)).astype(np.float32) for _ in range(2))
  return q, k, v, do


def _ring_fwd_grads(mesh, q, k, v, do, pos, seg, causal, chunk):
  """Ring attention in zig-zag layout; returns forward and d(sum(out*do))/d(q,k,v), natural order."""
  n = mesh.shape["sequence"]
  z, unz = (lambda x: zz.to_zigzag(x, n)), (lambda x: zz.from_zigzag(np.asarray(x), n))
  pos_z, seg_z, do_z = z(pos), z(seg), z(do)

  def loss(q, k, v):
    out = ra.ring_attention(
      q, k, v, mesh=mesh, positions_BT=pos_z, segment_ids_BT=seg_z, causal=causal, chunk=chunk
    )
    return jnp.sum(out * do_z), out

  (_, out), grads = jax.jit(jax.value_and_grad(loss, (0, 1, 2), has_aux=True))(z(q), z(k), z(v))
  return unz(out), [unz(g) for g in grads]


def _full_fwd_grads(q, k, v, do, pos, seg, causal):
  def loss(q, k, v):
    out = attention.attend(
      q, k, v, q_pos_BT=pos, k_pos_BS=pos, q_seg_BT=seg, k_seg_BS=seg, causal=causal, impl="naive"
    )
    return jnp.sum(out * do), out

  (_, out), grads = jax.jit(jax.value_and_grad(loss, (0, 1, 2), has_aux=True))(q, k, v)
  return np.asarray(out), [np.asarray(g) for g in grads]


# ------------------------------------------------------------------------- layout


def test_zigzag_layout_by_hand():
  # 8 tokens, 2 devices -> 4 chunks of 2: device 0 holds chunks 0 and 3, device 1 chunks 1, 2.
  np.testing.assert_array_equal(zz.zigzag_indices(8, 2), [0, 1, 6, 7, 2, 3, 4, 5])
  x = np.arange(3 * 16).reshape(3, 16)
  np.testing.assert_array_equal(zz.to_zigzag(x, 4), x[:, zz.zigzag_indices(16, 4)])
  np.testing.assert_array_equal(zz.from_zigzag(zz.to_zigzag(x, 4), 4), x)
  np.testing.assert_array_equal(zz.from_zigzag(zz.to_zigzag(x.T, 4, axis=0), 4, axis=0), x.T)
  with pytest.raises(ValueError, match="divisible by 2 \\* n"):
    zz.zigzag_indices(12, 4)


def test_zigzag_balances_causal_work():
  """Every device sees the same number of visible (query, key) pairs; contiguous does not."""
  t, n = 64, 8
  local = t // n

  def work(order):
    return [int(np.sum(order[i * local : (i + 1) * local] + 1)) for i in range(n)]

  zig = work(zz.zigzag_indices(t, n))
  assert len(set(zig)) == 1 and sum(zig) == t * (t + 1) // 2
  contiguous = work(np.arange(t))
  assert max(contiguous) > 10 * min(contiguous)


# ------------------------------------------------------------------------- numerics


def test_hand_case_running_mean():
  # q = 0 makes every visible score equal, so the causal output is the running mean of v.
  mesh = make_mesh(MeshConfig(sequence=8, fsdp=1))
  t = 16
  v = np.arange(2 * t, dtype=np.float32).reshape(1, t, 1, 2)
  q = np.zeros((1, t, 1, 2), np.float32)
  out = ra.ring_attention(zz.to_zigzag(q, 8), zz.to_zigzag(q, 8), zz.to_zigzag(v, 8), mesh=mesh)
  expected = np.cumsum(v, axis=1) / np.arange(1, t + 1)[None, :, None, None]
  np.testing.assert_allclose(zz.from_zigzag(np.asarray(out), 8), expected, **TOL)
  # So does scale=0 with any q and k.
  qk = zz.to_zigzag(np.random.default_rng(0).standard_normal((1, t, 1, 2), np.float32), 8)
  out = ra.ring_attention(qk, qk, zz.to_zigzag(v, 8), mesh=mesh, scale=0.0)
  np.testing.assert_allclose(zz.from_zigzag(np.asarray(out), 8), expected, **TOL)


@pytest.mark.parametrize(
  "mesh_sizes",
  [
    dict(sequence=8, fsdp=1),
    dict(data=2, sequence=4, fsdp=1),
    dict(data=2, tensor=2, sequence=2, fsdp=1),
  ],
  ids=["seq8", "data2-seq4", "data2-tensor2-seq2"],
)
def test_ring_equals_full_attention_causal(mesh_sizes):
  mesh = make_mesh(MeshConfig(**mesh_sizes))
  q, k, v, do = _inputs()
  b, t = q.shape[:2]
  pos = np.broadcast_to(np.arange(t, dtype=np.int32), (b, t))
  seg = np.ones((b, t), np.int32)
  out, grads = _ring_fwd_grads(mesh, q, k, v, do, pos, seg, causal=True, chunk=2)
  np.testing.assert_allclose(out, _loop_reference(q, k, v, pos, seg, True), **TOL)
  ref_out, ref_grads = _full_fwd_grads(q, k, v, do, pos, seg, causal=True)
  np.testing.assert_allclose(out, ref_out, **TOL)
  for name, g, r in zip("qkv", grads, ref_grads, strict=True):
    np.testing.assert_allclose(g, r, **TOL, err_msg=f"d{name}")


def test_ring_packed_segments_padding_and_explicit_mesh():
  """Packed rows (positions restart per segment, 0 = padding tail), on an Explicit mesh."""
  mesh = make_mesh(MeshConfig(data=2, sequence=4, fsdp=1, axis_type="explicit"))
  q, k, v, do = _inputs(seed=1)
  b, t = q.shape[:2]
  seg = np.zeros((b, t), np.int32)
  pos = np.zeros((b, t), np.int32)
  for row, cuts in enumerate([(0, 20, 45, 60), (0, 33, 64)]):
    for s, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:], strict=False)):
      seg[row, lo:hi], pos[row, lo:hi] = s + 1, np.arange(hi - lo)
  out, grads = _ring_fwd_grads(mesh, q, k, v, do, pos, seg, causal=True, chunk=8)
  np.testing.assert_allclose(out, _loop_reference(q, k, v, pos, seg, True), **TOL)
  assert np.all(out[0, 60:] == 0)  # padding queries see nothing
  _, ref_grads = _full_fwd_grads(q, k, v, do, pos, seg, causal=True)
  for name, g, r in zip("qkv", grads, ref_grads, strict=True):
    np.testing.assert_allclose(g, r, **TOL, err_msg=f"d{name}")


def test_ring_non_causal():
  mesh = make_mesh(MeshConfig(sequence=8, fsdp=1))
  q, k, v, do = _inputs(t=32, seed=2)
  b, t = q.shape[:2]
  pos = np.broadcast_to(np.arange(t, dtype=np.int32), (b, t))
  seg = np.ones((b, t), np.int32)
  out, grads = _ring_fwd_grads(mesh, q, k, v, do, pos, seg, causal=False, chunk=2)
  np.testing.assert_allclose(out, _loop_reference(q, k, v, pos, seg, False), **TOL)
  _, ref_grads = _full_fwd_grads(q, k, v, do, pos, seg, causal=False)
  for name, g, r in zip("qkv", grads, ref_grads, strict=True):
    np.testing.assert_allclose(g, r, **TOL, err_msg=f"d{name}")


def test_transformer_in_zigzag_layout_with_ring_matches_apply():
  """The whole model runs in zig-zag order: only attention needs to know about it."""
  cfg = tiny("qwen3", vocab_size=64, d_model=32, d_ff=64, head_dim=8)
  params = transformer.init(cfg, jax.random.key(0))
  mesh = make_mesh(MeshConfig(data=2, sequence=4, fsdp=1))
  n, b, t = 4, 2, 64
  tokens = np.random.default_rng(0).integers(0, 64, (b, t)).astype(np.int32)
  pos_z = zz.to_zigzag(np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)), n)

  @jax.jit
  def ring_logits(params, tokens_z):
    x = transformer.embed(params, tokens_z, cfg)
    for i in range(cfg.n_layers):
      lp = jax.tree.map(lambda a, i=i: a[i], params["layers"])
      q, k, v = transformer.layer_qkv(lp, x, pos_z, cfg)
      x, _ = transformer.layer_finish(lp, x, ra.ring_attention(q, k, v, mesh=mesh, chunk=4), cfg)
    return transformer.unembed(params, x, cfg)

  got = zz.from_zigzag(np.asarray(ring_logits(params, zz.to_zigzag(tokens, n))), n)
  want = np.asarray(jax.jit(lambda p, x: transformer.apply(p, x, cfg))(params, tokens))
  np.testing.assert_allclose(got, want, **TOL)


def test_bad_inputs_name_the_cause():
  q, k, v, _ = _inputs(t=24)
  with pytest.raises(ValueError, match="divisible by 2 \\* sequence size = 16"):
    ra.ring_attention(q, k, v, mesh=make_mesh(MeshConfig(sequence=8, fsdp=1)))
  with pytest.raises(ValueError, match="'sequence' axis"):
    ra.ring_attention(q, k, v, mesh=jax.make_mesh((8,), ("data",)))


# ------------------------------------------------------------------------- in the model


def _ce_loss(params, tokens, pos, seg, cfg):
  """Mean next-token cross-entropy over tokens whose successor is in the same segment."""
  logits = transformer.apply(params, tokens, cfg, positions_BT=pos, segment_ids_BT=seg)
  logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
  nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
  w = ((seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] != 0)).astype(jnp.float32)
  return jnp.sum(nll * w) / jnp.sum(w), logits


def _packed_rows(b, t, cuts, seed):
  """Tokens plus packed positions/segments: row r holds segments [cuts[r][i], cuts[r][i+1])."""
  tokens = np.random.default_rng(seed).integers(0, 64, (b, t)).astype(np.int32)
  pos, seg = np.zeros((b, t), np.int32), np.zeros((b, t), np.int32)
  for row, c in enumerate(cuts):
    for s, (lo, hi) in enumerate(zip(c[:-1], c[1:], strict=False)):
      seg[row, lo:hi], pos[row, lo:hi] = s + 1, np.arange(hi - lo)
  return tokens, pos, seg


@pytest.mark.parametrize(
  "mesh_sizes, t, cuts",
  [
    (dict(sequence=8, fsdp=1), 64, [(0, 64), (0, 64)]),
    (dict(data=2, sequence=4, fsdp=1), 50, [(0, 20, 41, 47), (0, 33, 50)]),
  ],
  ids=["seq8-plain64", "data2-seq4-packed50-padded"],
)
def test_model_attention_ring_equals_naive_on_one_device(mesh_sizes, t, cuts):
  """ModelConfig(attention='ring') on a sequence mesh: same logits and loss gradient as
  attention='naive' on one device (50 tokens also exercise the ring's padding)."""
  from parallel.rules import use_mesh_rules

  base = tiny("qwen3", vocab_size=64, d_model=32, d_ff=64, head_dim=8, attn_chunk=2)
  params = transformer.init(base, jax.random.key(0))
  tokens, pos, seg = _packed_rows(2, t, cuts, seed=t)
  grad_fn = jax.value_and_grad(_ce_loss, has_aux=True)
  run = jax.jit(grad_fn, static_argnums=4)
  (want_loss, want_logits), want_grads = run(
    params, tokens, pos, seg, base.replace(attention="naive")
  )

  ring = base.replace(attention="ring")
  mesh = make_mesh(MeshConfig(**mesh_sizes))
  with use_mesh_rules(mesh):
    assert "ppermute" in str(
      jax.make_jaxpr(grad_fn, static_argnums=4)(params, tokens, pos, seg, ring)
    )
    (loss, logits), grads = run(params, tokens, pos, seg, ring)
  np.testing.assert_allclose(np.asarray(logits), np.asarray(want_logits), **TOL)
  np.testing.assert_allclose(float(loss), float(want_loss), **TOL)
  jax.tree_util.tree_map_with_path(
    lambda p, g, w: np.testing.assert_allclose(g, w, **TOL, err_msg=jax.tree_util.keystr(p)),
    grads,
    want_grads,
  )
  assert float(jnp.max(jnp.abs(want_grads["embed"]))) > 1e-4  # the gradient is not trivially 0


def test_model_attention_ring_without_sequence_mesh_is_chunked():
  """No mesh, or sequence=1: 'ring' runs the chunked kernel (same function, no collectives)."""
  from parallel.rules import use_mesh_rules

  cfg = tiny("qwen3", vocab_size=64, d_model=32, d_ff=64, head_dim=8, attn_chunk=4)
  params = transformer.init(cfg, jax.random.key(1))
  tokens = np.random.default_rng(1).integers(0, 64, (2, 24)).astype(np.int32)
  ring = cfg.replace(attention="ring")
  want = transformer.apply(params, tokens, cfg.replace(attention="naive"))
  for mesh in (None, make_mesh(MeshConfig(data=2, fsdp=4))):
    with use_mesh_rules(mesh):
      assert "ppermute" not in str(
        jax.make_jaxpr(transformer.apply, static_argnums=2)(params, tokens, ring)
      )
      got = jax.jit(transformer.apply, static_argnums=2)(params, tokens, ring)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), **TOL)
  with pytest.raises(ValueError, match="attention 'flash' not in"):
    cfg.replace(attention="flash")
