"""The fused paged-attention decode kernel (attention="paged_ffi") against the gather path,
a naive NumPy loop and a case worked by hand; the engine's greedy tokens with both paths.

Tolerance (derived, first order in u = 2^-24, fp32): per query head, with scores s_n over the
visible keys n (N of them; the gather path's dot also adds the masked zeros of all N_all),
  e_n = gamma_d * sum_i |q_i k_ni|          a dot product's summation error (any order)
  rho = 2 (2 max_n e_n + u max_n |s_n - max s| + 4u) + gamma_N + u
                                            p_n's relative error: the score errors, the
                                            subtraction, exp (<= 4 ulp), the sum, the divide
  |out - exact| <= (rho + gamma_N_all) * sum_n p_n |v_n|
with gamma_n = n u / (1 - n u). Each implementation is held to it against a float64 NumPy
loop over the same (dequantised, rounded) keys and values, and the two to twice it; a bfloat16
output adds its own rounding, 2^-8 |out| per side.

Legend: S slots, H query heads, K kv heads, G = H // K, d head dim, L layers, P pages,
p page size, M pages per slot, N = M*p key positions.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from envs.sandbox.testing import missing
from models import config
from models import transformer as tfm
from models.inference import engine_steps, kv_evict
from models.inference import kv_cache as kvc
from models.inference import paged_attention as pa
from models.inference.engine import Engine
from models.inference.generator import GenerationRequest, Generator
from models.sampling import SamplingParams

U = 2.0**-24


@pytest.fixture(autouse=True)
def _kernel():
  """Skips (fails under CI=true: .ci/run's set-up builds it) without the built kernel."""
  if why := pa.unavailable():
    missing(f"the paged-attention kernel is unavailable: {why}")


def _gamma(n):
  return n * U / (1 - n * U)


def _values(cache, compute_dtype):
  """float64 keys, values [L, P, p, K, d] as the gather path sees them (dequantised, cast)."""

  def one(x, scale):
    x = np.asarray(x.astype(jnp.float32))
    if scale is not None:
      s = np.asarray(scale)
      if compute_dtype == jnp.bfloat16:  # both factors are cast, then multiplied, in bf16
        s = s.astype(ml_dtypes.bfloat16).astype(np.float32)
      x = x * s[..., None]
    if compute_dtype == jnp.bfloat16:
      x = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    return x.astype(np.float64)

  return one(cache.k, cache.k_scale), one(cache.v, cache.v_scale)


def _numpy_reference(q_SHd, k, v, layer, table_SM, k_pos_SN, pos_S):
  """A naive loop in float64: (out [S, H, d], error bound [S, H, d])."""
  S, H, d = q_SHd.shape
  K, p = k.shape[3], k.shape[2]
  G, N_all = H // K, k_pos_SN.shape[1]
  q = (np.float32(q_SHd) * np.float32(d**-0.5)).astype(np.float64)  # the callers' f32 scale
  out, bound = np.zeros((S, H, d)), np.zeros((S, H, d))
  for s in range(S):
    for h in range(H):
      keys, vals = [], []
      for n in range(N_all):
        if k_pos_SN[s, n] <= pos_S[s]:
          page = table_SM[s, n // p]
          keys.append(k[layer, page, n % p, h // G])
          vals.append(v[layer, page, n % p, h // G])
      keys, vals = np.array(keys), np.array(vals)
      scores = keys @ q[s, h]
      e = _gamma(d) * (np.abs(keys) @ np.abs(q[s, h]))
      w = np.exp(scores - scores.max())
      prob = w / w.sum()
      out[s, h] = prob @ vals
      rho = 2 * (2 * e.max() + U * (scores.max() - scores.min()) + 4 * U) + _gamma(len(w)) + U
      bound[s, h] = (rho + _gamma(N_all)) * (prob @ np.abs(vals))
  return out, bound


def _gather_attend(q_SHd, cache, layer, table_SM, k_pos_SN, pos_S):
  kc, vc = kvc.gather(cache, layer, table_SM, dtype=q_SHd.dtype)
  return engine_steps.decode_attend(q_SHd, kc, vc, k_pos_SN, pos_S)


def _random_case(seed, *, S, H, K, d, p, M, kv_dtype, L=2):
  """A cache with random K/V in every page, a table of distinct pages, ragged lengths (an
  idle slot at 0, one ending on a page boundary, one filling its table)."""
  rng = np.random.default_rng(seed)
  P = S * M + 1
  cache = kvc.init_cache(L, P, p, K, d, kv_dtype)
  flat = lambda: jnp.asarray(rng.normal(size=(L, P * p, K, d)) * rng.uniform(0.5, 2), jnp.float32)
  pages, offsets = jnp.repeat(jnp.arange(P), p), jnp.tile(jnp.arange(p), P)
  cache = kvc.write(cache, slice(None), pages, offsets, flat(), flat())
  table_SM = (1 + rng.permutation(S * M)).reshape(S, M).astype(np.int32)
  pos_S = rng.integers(0, M * p, S).astype(np.int32)
  pos_S[: min(S, 3)] = [0, p, M * p - 1][: min(S, 3)]
  for s in range(S):  # entries past a slot's last page are unallocated, as the host leaves them
    table_SM[s, pos_S[s] // p + 1 :] = kvc.NULL_PAGE
  q_SHd = (rng.normal(size=(S, H, d)) * 2).astype(np.float32)
  return q_SHd, cache, table_SM, pos_S


CASES = [  # (kv_dtype, compute dtype, page size, H, K)
  ("float32", jnp.float32, 4, 4, 4),
  ("float32", jnp.float32, 16, 9, 3),
  ("float32", jnp.float32, 1, 8, 1),
  ("bfloat16", jnp.float32, 4, 6, 2),
  ("bfloat16", jnp.bfloat16, 16, 9, 3),
  ("int8", jnp.float32, 4, 9, 3),
  ("int8", jnp.bfloat16, 8, 4, 2),
  ("float32", jnp.bfloat16, 4, 8, 2),
]


@pytest.mark.parametrize("kv_dtype,compute,p,H,K", CASES)
def test_kernel_matches_numpy_loop_and_gather_path(kv_dtype, compute, p, H, K):
  d, M, S = 32, 64 // p, 5
  q, cache, table, pos = _random_case(p * H + K, S=S, H=H, K=K, d=d, p=p, M=M, kv_dtype=kv_dtype)
  k_pos = np.asarray(kv_evict.key_positions(jnp.asarray(pos), M, p, None))
  k64, v64 = _values(cache, compute)
  args = (jnp.asarray(q, compute), cache)
  rest = tuple(map(jnp.asarray, (table, k_pos, pos)))
  for layer in range(cache.k.shape[0]):
    q_in = np.asarray(args[0].astype(jnp.float32))  # what both paths see (bf16-rounded q)
    want, bound = _numpy_reference(q_in, k64, v64, layer, table, k_pos, pos)
    if compute == jnp.bfloat16:
      bound = bound + 2.0**-8 * (np.abs(want) + bound)
    got = np.asarray(jax.jit(pa.decode_attend)(*args, layer, *rest)[:, 0].astype(jnp.float32))
    ref = np.asarray(jax.jit(_gather_attend)(*args, layer, *rest)[:, 0].astype(jnp.float32))
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)
    assert np.all(np.abs(ref - want) <= bound), np.max(np.abs(ref - want) - bound)
    assert np.all(np.abs(got - ref) <= 2 * bound)
    assert bound.max() < 1e-2 * np.abs(want).max()  # the bound is not vacuous


def test_tiny_case_by_hand():
  """One slot, d=2, pages of 2: keys at positions 0..2 score 0, ln 2, ln 3, so p = 1/6, 2/6,
  3/6; the key at position 3 (same page as 2) is in the future and must not count."""
  L, P, p, K, d = 1, 4, 2, 1, 2
  k = np.zeros((L, P, p, K, d), np.float32)
  v = np.zeros((L, P, p, K, d), np.float32)
  # table [2, 3]: positions 0, 1 in page 2; positions 2, 3 in page 3
  k[0, 2, :, 0] = [[0, 0], [np.log(2), 0]]
  k[0, 3, :, 0] = [[np.log(3), 0], [50, 0]]
  v[0, 2, :, 0] = [[6, 0], [0, 6]]
  v[0, 3, :, 0] = [[6, 6], [1e6, 1e6]]
  cache = kvc.KVCache(jnp.asarray(k), jnp.asarray(v), None, None)
  q = jnp.asarray([[[np.sqrt(2), 0.0], [0.0, 1.0]]], jnp.float32)  # x d**-0.5: [1, 0] and [0, .7]
  table, pos = jnp.asarray([[2, 3]], jnp.int32), jnp.asarray([2], jnp.int32)
  k_pos = kv_evict.key_positions(pos, 2, p, None)
  out = np.asarray(pa.decode_attend(q, cache, 0, table, k_pos, pos))[0, 0]
  # head 0: (1*[6,0] + 2*[0,6] + 3*[6,6]) / 6 = [4, 5]; head 1 scores all 0: the mean [4, 4]
  np.testing.assert_allclose(out, [[4.0, 5.0], [4.0, 4.0]], rtol=1e-6)


def test_window_key_positions_and_traced_layer():
  """A KV window (sink + ring entries, FAR for empty ones) and a layer index traced under a
  scan (the prefill layout) read the same keys as the gather path."""
  S, H, K, d, p = 3, 4, 2, 16, 4
  window = kv_evict.Window(sink=1, ring=3)
  q, cache, table, _ = _random_case(7, S=S, H=H, K=K, d=d, p=p, M=window.pages, kv_dtype="float32")
  pos = jnp.asarray([2, 13, 41], jnp.int32)  # before the ring fills, in its first lap, wrapped
  table = jnp.asarray(1 + np.arange(S * window.pages).reshape(S, window.pages), jnp.int32)
  k_pos = kv_evict.key_positions(pos, window.pages, p, window)
  q = jnp.asarray(q)

  def over_layers(f):
    def body(_, layer):
      return None, f(q, cache, layer, table, k_pos, pos)

    return jax.lax.scan(body, None, jnp.arange(cache.k.shape[0]))[1]

  got = np.asarray(jax.jit(over_layers, static_argnums=0)(pa.decode_attend))[:, :, 0]
  ref = np.asarray(jax.jit(over_layers, static_argnums=0)(_gather_attend))[:, :, 0]
  k64, v64 = _values(cache, jnp.float32)
  for layer in range(cache.k.shape[0]):
    args = (np.asarray(q), k64, v64, layer, np.asarray(table), np.asarray(k_pos), np.asarray(pos))
    want, bound = _numpy_reference(*args)
    assert np.all(np.abs(got[layer] - want) <= bound)
    assert np.all(np.abs(got[layer] - ref[layer]) <= 2 * bound)
  assert not np.allclose(got[0], got[1])  # the layers differ: the traced index is used


def test_fallback_without_the_library(monkeypatch, tmp_path, caplog):
  """A missing library makes the engine decode on the gather path, saying why once."""
  monkeypatch.setattr(pa, "library_path", lambda: tmp_path / "absent.so")
  pa.unavailable.cache_clear()  # tmp_path makes the reason new, so it is logged here
  try:
    with caplog.at_level("WARNING"):
      assert pa.resolve("paged_ffi") == "gather"
      assert pa.resolve("paged_ffi") == "gather"
    assert [r.message for r in caplog.records if "absent.so" in r.message] == [
      "attention='paged_ffi' unavailable (absent.so is not built (python -m launch.build_native, "
      "or launch/setup.sh)): using 'gather'"
    ]
  finally:
    monkeypatch.undo()
    pa.unavailable.cache_clear()
  assert pa.resolve("paged_ffi") == "paged_ffi"
  with pytest.raises(ValueError, match="not in"):
    pa.resolve("flash")


MAX_LEN = 64


@pytest.mark.parametrize("kv_dtype", ["float32", "int8"])
def test_engine_greedy_tokens_equal_with_both_paths(kv_dtype):
  """Greedy decoding of a tiny Qwen3 (weights scaled up so it does not just repeat) gives the
  same tokens with the kernel as with the gather path, ragged prompts across page edges."""
  cfg = config.tiny("qwen3", max_seq_len=MAX_LEN)
  params = tfm.init(cfg, jax.random.PRNGKey(0))
  layers = jax.tree.map(lambda a: a * 10.0 if a.ndim >= 3 else a, params["layers"])
  params = dict(params, embed=params["embed"] * 3.0, layers=layers)
  rng = np.random.default_rng(0)
  prompts = [[int(x) for x in rng.integers(0, 256, n)] for n in (3, 8, 13)]
  tokens = {}
  for attention in ("gather", "paged_ffi"):
    eng = Engine(cfg, params, max_concurrent_decodes=4, page_size=8, max_seq_len=MAX_LEN,
                 kv_dtype=kv_dtype, attention=attention)  # fmt: skip
    assert eng.attention == attention
    with Generator(eng) as g:
      reqs = [GenerationRequest(pr, 40, SamplingParams(greedy=True)) for pr in prompts]
      tokens[attention] = [r.tokens for r in g.generate(reqs)]
  assert tokens["paged_ffi"] == tokens["gather"]
  assert len({tuple(t) for t in tokens["gather"]}) == 3 and len(set(tokens["gather"][0])) > 3


def test_bad_shapes_are_refused_not_read_out_of_bounds():
  q, cache, table, pos = _random_case(3, S=2, H=4, K=2, d=8, p=4, M=2, kv_dtype="int8")
  k_pos = kv_evict.key_positions(jnp.asarray(pos), 2, 4, None)
  with pytest.raises(Exception, match=r"k_pos \[S,M\*p\]"):
    pa.decode_attend(jnp.asarray(q), cache, 0, jnp.asarray(table), k_pos[:, :4], jnp.asarray(pos))
  bad = kvc.KVCache(cache.k, cache.v, cache.k_scale[:, :1], cache.v_scale)
  with pytest.raises(Exception, match="int8 scales"):
    pa.decode_attend(jnp.asarray(q), bad, 0, jnp.asarray(table), k_pos, jnp.asarray(pos))
