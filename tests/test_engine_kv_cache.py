"""Paged KV cache: write/gather vs a NumPy loop, int8 error bound, page pool accounting."""

import jax.numpy as jnp
import numpy as np
import pytest

from models.inference import kv_cache as kvc


def test_write_gather_roundtrip_matches_numpy():
  rng = np.random.default_rng(0)
  L, P, p, K, d = 2, 6, 4, 2, 3
  cache = kvc.init_cache(L, P, p, K, d)
  table = np.array([[3, 1, 0], [5, 2, 4]], np.int32)  # slot 0 has 2 pages, slot 1 has 3
  pos = np.array([[0, 1, 5, 7, 8], [2, 3, 9, 11, 4]])
  valid = np.array([[True] * 4 + [False], [True] * 5])
  page, off = kvc.write_positions(jnp.asarray(table), jnp.asarray(pos), p, jnp.asarray(valid))
  k = rng.normal(size=(2, 5, K, d)).astype(np.float32)
  cache = kvc.write(
    cache, 1, page.reshape(-1), off.reshape(-1), k.reshape(10, K, d), -k.reshape(10, K, d)
  )
  kg, vg = kvc.gather(cache, 1, jnp.asarray(table))
  ref = np.zeros(
    (2, 3 * p, K, d), np.float32
  )  # naive: position t of slot s lives in table[s, t // p]
  for s in range(2):
    for j in range(5):
      t = pos[s, j]
      if valid[s, j] and table[s, t // p] != 0:
        ref[s, t] = k[s, j]
  live = np.zeros((2, 3 * p), bool)
  for s in range(2):
    for t in range(3 * p):
      live[s, t] = table[s, t // p] != 0
  np.testing.assert_array_equal(np.asarray(kg)[live], ref[live])
  np.testing.assert_array_equal(np.asarray(vg)[live], -ref[live])
  assert np.all(np.asarray(cache.k[0]) == 0)  # other layers untouched


def test_int8_error_is_bounded_by_half_a_step():
  rng = np.random.default_rng(1)
  x = (rng.normal(size=(64, 4, 32)) * rng.uniform(0.01, 10, size=(64, 4, 1))).astype(np.float32)
  cache = kvc.init_cache(1, 9, 8, 4, 32, kv_dtype="int8")
  pages = 1 + np.arange(64) // 8
  cache = kvc.write(
    cache, 0, jnp.asarray(pages), jnp.asarray(np.arange(64) % 8), jnp.asarray(x), jnp.asarray(x)
  )
  table = jnp.arange(1, 9, dtype=jnp.int32)[None]
  kg, _ = kvc.gather(cache, 0, table)
  err = np.abs(np.asarray(kg)[0] - x)
  bound = np.abs(x).max(axis=-1, keepdims=True) / 254 * (1 + 1e-5)
  assert np.all(err <= bound)
  assert err.max() > 0  # it really is quantised


def test_pool_alloc_release_refcounts():
  pool = kvc.PagePool(8, 4)
  assert pool.num_available == 7
  a = pool.alloc(3)
  assert kvc.NULL_PAGE not in a and pool.num_used == 3
  assert pool.reserve(4) and not pool.reserve(1)
  with pytest.raises(kvc.OutOfPages):
    pool.alloc(1)
  b = pool.alloc(2, from_reserved=True)
  assert pool.reserved == 2
  pool.retain(b)
  pool.release(b)
  assert pool.num_used == 5
  pool.release(a + b)
  pool.unreserve(2)
  assert pool.num_used == 0 and pool.num_available == 7
  with pytest.raises(AssertionError, match="double free"):
    pool.release(a[:1])


def test_prefix_cache_shares_full_blocks_and_evicts_lru():
  pool = kvc.PagePool(5, 2, prefix_caching=True)  # 4 usable pages of 2 tokens
  toks = [1, 2, 3, 4, 5]
  pages = pool.alloc(3)
  pool.register_prefix(toks, pages)
  assert pool.num_cached == 2  # [1,2] and [3,4]; the partial block [5] is not shared
  hit = pool.lookup_prefix([1, 2, 3, 4, 9])
  assert hit == pages[:2] and pool.is_shared(hit[0])
  assert pool.lookup_prefix([1, 2, 7, 7]) == pages[:1]
  assert pool.lookup_prefix([2, 1]) == []
  pool.release(pages + hit + pages[:1])
  assert pool.num_used == 0 and pool.num_available == 4  # cached pages are evictable
  pool.alloc(4)  # forces eviction of both cached blocks
  assert pool.num_cached == 0 and pool.lookup_prefix([1, 2]) == []


def test_prefix_cache_forgets_older_weights_blocks():
  pool = kvc.PagePool(6, 2, prefix_caching=True)
  held, idle = pool.alloc(2), pool.alloc(2)
  pool.register_prefix([1, 2, 3, 4], held)
  pool.register_prefix([5, 6, 7, 8], idle)
  pool.release(idle)  # evictable cached pages
  assert pool.num_cached == 4 and pool.lookup_prefix([5, 6, 7, 8]) == idle
  pool.release(idle)
  pool.new_weights()
  assert pool.num_cached == 0 and pool.lookup_prefix([1, 2, 3, 4]) == []
  assert pool.lookup_prefix([5, 6, 7, 8]) == [] and len(pool._free) == 3  # idle pages freed
  pool.register_prefix([1, 2, 3, 4], held)  # the new weights' blocks are cached again
  assert pool.lookup_prefix([1, 2, 3, 4]) == held
  pool.release(held + held)
  assert pool.num_used == 0 and pool.num_available == 5


@pytest.mark.parametrize("kv_dtype", ["float32", "bfloat16", "int8"])
def test_gather_equals_direct_indexing_with_shared_pages(kv_dtype):
  """The row gather over the [L*P, ...] view reads what pages[layer, table] holds, bit for bit,
  for every layer, with shuffled and shared (prefix-reused) pages and the null page."""
  rng = np.random.default_rng(2)
  L, P, p, K, d = 3, 9, 4, 2, 8
  cache = kvc.init_cache(L, P, p, K, d, kv_dtype)
  for layer in range(L):
    pages = np.repeat(np.arange(1, P), p)
    offs = np.tile(np.arange(p), P - 1)
    x = jnp.asarray(rng.normal(size=(len(pages), K, d)), jnp.float32)
    cache = kvc.write(cache, layer, jnp.asarray(pages), jnp.asarray(offs), x, -2 * x)
  table = jnp.asarray([[3, 1, 0], [3, 8, 5], [6, 2, 4]], jnp.int32)  # page 3 shared by 2 slots
  for layer in range(L):
    kg, vg = kvc.gather(cache, layer, table)
    for got, pages, scales in ((kg, cache.k, cache.k_scale), (vg, cache.v, cache.v_scale)):
      want = pages[layer, table].astype(jnp.float32)
      if scales is not None:
        want = want * scales[layer, table][..., None]
      np.testing.assert_array_equal(np.asarray(got), np.asarray(want).reshape(3, 3 * p, K, d))
