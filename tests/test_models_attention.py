"""models.attention: naive vs a NumPy loop and a hand case; chunked vs naive."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import attention

# One compile per shape/option set instead of many small eager dispatches.
attend = jax.jit(attention.attend, static_argnames=("causal", "impl", "chunk", "scale"))


def _loop_reference(q, k, v, q_pos, k_pos, q_seg, k_seg, causal):
  """Deliberately naive: one query, one head at a time."""
  B, T, H, d = q.shape
  K = k.shape[2]
  out = np.zeros((B, T, H, d))
  for b in range(B):
    for h in range(H):
      kh = h // (H // K)
      for t in range(T):
        scores, vals = [], []
        for s in range(k.shape[1]):
          ok = k_seg[b, s] != 0 and q_seg[b, t] == k_seg[b, s]
          if causal:
            ok = ok and k_pos[b, s] <= q_pos[b, t]
          if ok:
            scores.append(np.dot(q[b, t, h], k[b, s, kh]) / np.sqrt(d))
            vals.append(v[b, s, kh])
        if scores:
          w = np.exp(np.array(scores) - max(scores))
          out[b, t, h] = (w[:, None] * np.array(vals)).sum(0) / w.sum()
  return out


def _inputs(B=2, T=11, S=11, H=4, K=2, d=8, seed=0):
  r = np.random.RandomState(seed)
  f = lambda *s: r.randn(*s).astype(np.float32)
  return f(B, T, H, d), f(B, S, K, d), f(B, S, K, d)


def test_hand_computed_case():
  # One head, d=1, two tokens: q1 = 1 sees k0 = 0 and k1 = 2 with scores 0 and 2.
  q = np.array([1.0, 1.0], np.float32).reshape(1, 2, 1, 1)
  k = np.array([0.0, 2.0], np.float32).reshape(1, 2, 1, 1)
  v = np.array([10.0, 20.0], np.float32).reshape(1, 2, 1, 1)
  pos = jnp.array([[0, 1]])
  w1 = np.exp(2.0) / (1 + np.exp(2.0))
  want = np.array([10.0, 10 * (1 - w1) + 20 * w1])
  for impl in ("naive", "chunked"):
    out = attend(q, k, v, q_pos_BT=pos, k_pos_BS=pos, impl=impl, chunk=1)
    np.testing.assert_allclose(np.asarray(out).reshape(2), want, rtol=1e-6)


def _cases():
  pos = np.tile(np.arange(11), (2, 1))
  seg = np.array([[1] * 4 + [2] * 5 + [0] * 2, [3] * 11])
  packed_pos = np.array([list(range(4)) + list(range(5)) + [0, 0], list(range(11))])
  return {
    "causal": dict(q_pos=pos, k_pos=pos),
    "bidirectional": dict(q_pos=pos, k_pos=pos, causal=False),
    "packed_segments": dict(q_pos=packed_pos, k_pos=packed_pos, q_seg=seg, k_seg=seg),
    # 3 new queries at positions 8..10 against an 11-slot cache whose last slot is empty.
    "offset_queries": dict(
      T=3,
      q_pos=pos[:, 8:],
      k_pos=pos,
      q_seg=np.ones((2, 3), int),
      k_seg=np.array([[1] * 10 + [0]] * 2),
    ),
    "decode_one_token": dict(T=1, q_pos=np.array([[4], [9]]), k_pos=pos),
    "mqa": dict(K=1, q_pos=pos, k_pos=pos),
  }


@pytest.mark.parametrize("name", sorted(_cases()))
def test_naive_matches_loop_and_chunked_matches_naive(name):
  c = dict(_cases()[name])
  causal = c.pop("causal", True)
  q, k, v = _inputs(T=c.pop("T", 11), K=c.pop("K", 2))
  kw = dict(
    q_pos_BT=c["q_pos"],
    k_pos_BS=c["k_pos"],
    q_seg_BT=c.get("q_seg"),
    k_seg_BS=c.get("k_seg"),
    causal=causal,
  )
  qs = np.ones_like(c["q_pos"]) if c.get("q_seg") is None else c["q_seg"]
  ks = np.ones_like(c["k_pos"]) if c.get("k_seg") is None else c["k_seg"]
  want = _loop_reference(q, k, v, c["q_pos"], c["k_pos"], qs, ks, causal)
  naive = attend(q, k, v, impl="naive", **kw)
  np.testing.assert_allclose(np.asarray(naive), want, atol=1e-5)
  for chunk in (4, 64):  # uneven and larger than the sequence
    out = attend(q, k, v, impl="chunked", chunk=chunk, **kw)
    np.testing.assert_allclose(np.asarray(out), np.asarray(naive), atol=1e-5)


@pytest.mark.parametrize("name", ["causal", "packed_segments", "offset_queries", "mqa"])
def test_chunked_gradients_match_naive(name):
  c = dict(_cases()[name])
  c.pop("causal", None)
  q, k, v = _inputs(T=c.pop("T", 11), K=c.pop("K", 2), seed=1)
  kw = dict(
    q_pos_BT=c["q_pos"], k_pos_BS=c["k_pos"], q_seg_BT=c.get("q_seg"), k_seg_BS=c.get("k_seg")
  )
  w = jnp.asarray(np.random.RandomState(2).randn(*q.shape).astype(np.float32))

  def loss(impl, q, k, v):
    return jnp.sum(w * attend(q, k, v, impl=impl, chunk=4, **kw))

  g_naive = jax.jit(jax.grad(lambda *a: loss("naive", *a), argnums=(0, 1, 2)))(q, k, v)
  g_chunk = jax.jit(jax.grad(lambda *a: loss("chunked", *a), argnums=(0, 1, 2)))(q, k, v)
  for a, b in zip(g_naive, g_chunk, strict=True):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5)


def test_fully_masked_rows_are_zero_and_finite():
  q, k, v = _inputs(T=4, S=4)
  seg = np.array([[1, 1, 0, 0], [0, 0, 0, 0]])
  pos = np.tile(np.arange(4), (2, 1))
  for impl in ("naive", "chunked"):
    f = lambda q, k, v, impl=impl: attend(
      q, k, v, q_pos_BT=pos, k_pos_BS=pos, q_seg_BT=seg, k_seg_BS=seg, impl=impl, chunk=2
    )
    out = np.asarray(f(q, k, v))
    assert np.all(out[0, 2:] == 0) and np.all(out[1] == 0) and np.all(np.isfinite(out))
    grads = jax.jit(jax.grad(lambda q, k, v, f=f: jnp.sum(f(q, k, v)), argnums=(0, 1, 2)))(q, k, v)
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)


def test_bf16_close_to_fp32():
  q, k, v = _inputs()
  pos = np.tile(np.arange(11), (2, 1))
  ref = attend(q, k, v, q_pos_BT=pos, k_pos_BS=pos, impl="naive")
  bf = [jnp.asarray(a, jnp.bfloat16) for a in (q, k, v)]
  out = attend(*bf, q_pos_BT=pos, k_pos_BS=pos, impl="chunked", chunk=4)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref), atol=5e-2)


def test_chunked_memory_is_linear_in_length():
  """The compiled chunked forward+backward needs far less than one T x T score matrix."""
  T, H, d = 4096, 2, 16

  def temp_bytes(impl):
    q = jax.ShapeDtypeStruct((1, T, H, d), jnp.float32)
    pos = jax.ShapeDtypeStruct((1, T), jnp.int32)
    f = lambda q, pos: jax.grad(
      lambda q: jnp.sum(
        attend(q, q[:, :, :1], q[:, :, :1], q_pos_BT=pos, k_pos_BS=pos, impl=impl, chunk=256)
      )
    )(q)
    return jax.jit(f).lower(q, pos).compile().memory_analysis().temp_size_in_bytes

  scores = T * T * H * 4
  assert temp_bytes("chunked") < scores / 8
  assert temp_bytes("naive") > scores  # the reference really is quadratic
