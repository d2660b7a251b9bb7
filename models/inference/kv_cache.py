"""Paged KV cache: device arrays + pure read/write, and the host-side page pool.

Shape legend: L layers, P pages, p page size (tokens per page), K kv heads, d head dim,
S decode slots, M pages per slot (max_seq_len / p), N tokens written at once.

Page 0 is the null page: it is never handed out, unallocated page-table entries point at it,
and writes that must go nowhere (padding, idle slots) land there. Nothing valid is ever read
from it because every read is masked by position.

int8 mode stores each (token, head) vector as int8 with one float32 scale max|x|/127, so the
error of an entry is at most scale/2 = max|x|/254 per element.
"""

from __future__ import annotations

import collections
import dataclasses

import jax
import jax.numpy as jnp

from models.inference import kv_evict

NULL_PAGE = 0


@dataclasses.dataclass(frozen=True)
class KVCache:
  """k/v pages [L, P, p, K, d]; scales [L, P, p, K] (int8 mode) or None."""

  k: jax.Array
  v: jax.Array
  k_scale: jax.Array | None
  v_scale: jax.Array | None

  @property
  def page_size(self) -> int:
    return self.k.shape[2]

  @property
  def quantized(self) -> bool:
    return self.k_scale is not None


jax.tree_util.register_dataclass(
  KVCache, data_fields=["k", "v", "k_scale", "v_scale"], meta_fields=[]
)


def init_cache(n_layers, num_pages, page_size, n_kv_heads, head_dim, kv_dtype="float32"):
  """Zeroed cache; kv_dtype is 'float32', 'bfloat16' or 'int8' (per-token-head scales)."""
  shape = (n_layers, num_pages, page_size, n_kv_heads, head_dim)
  if kv_dtype == "int8":
    k_s, v_s = jnp.zeros(shape[:-1], jnp.float32), jnp.zeros(shape[:-1], jnp.float32)
    return KVCache(jnp.zeros(shape, jnp.int8), jnp.zeros(shape, jnp.int8), k_s, v_s)
  if kv_dtype not in ("float32", "bfloat16"):
    raise ValueError(f"kv_dtype must be 'float32', 'bfloat16' or 'int8' (got {kv_dtype!r})")
  return KVCache(jnp.zeros(shape, kv_dtype), jnp.zeros(shape, kv_dtype), None, None)


def quantize_int8(x_NKd):
  """Symmetric int8 per (token, head): returns (int8 values, float32 scale [N, K])."""
  x = x_NKd.astype(jnp.float32)
  scale_NK = jnp.max(jnp.abs(x), axis=-1) / 127.0
  safe_NK = jnp.where(scale_NK > 0, scale_NK, 1.0)
  q = jnp.clip(jnp.round(x / safe_NK[..., None]), -127, 127).astype(jnp.int8)
  return q, scale_NK


def write(cache: KVCache, layer, page_N, offset_N, k_NKd, v_NKd) -> KVCache:
  """Scatters N tokens' k/v of one layer into (page, offset) slots."""
  if cache.quantized:
    kq, ks = quantize_int8(k_NKd)
    vq, vs = quantize_int8(v_NKd)
    return KVCache(
      cache.k.at[layer, page_N, offset_N].set(kq),
      cache.v.at[layer, page_N, offset_N].set(vq),
      cache.k_scale.at[layer, page_N, offset_N].set(ks),
      cache.v_scale.at[layer, page_N, offset_N].set(vs),
    )
  dt = cache.k.dtype
  return KVCache(
    cache.k.at[layer, page_N, offset_N].set(k_NKd.astype(dt)),
    cache.v.at[layer, page_N, offset_N].set(v_NKd.astype(dt)),
    None,
    None,
  )


def gather(cache: KVCache, layer, page_table_SM, dtype=jnp.float32):
  """One layer's keys/values of every slot in page-table order: ([S, M*p, K, d]) x 2.

  Each page is one row of a [L*P, p*K*d] view (slicing the layer out first would copy all of
  it), so the gather copies whole rows; the barrier keeps XLA from fusing it into the
  attention's transposes, whose strided per-element gather ran 20% slower (decode at 32 slots).
  """
  S, M = page_table_SM.shape
  L, P, p = cache.k.shape[:3]
  rows_N = layer * P + page_table_SM.reshape(-1)

  def rows(a):  # [L, P, ...] -> this layer's pages in table order, [S, M, ...]
    return jnp.take(a.reshape(L * P, -1), rows_N, axis=0, mode="clip").reshape(S, M, *a.shape[2:])

  def one(pages, scales):
    x = rows(pages).astype(dtype)
    if scales is not None:
      x = x * rows(scales)[..., None].astype(dtype)
    return x.reshape(S, M * p, *x.shape[3:])

  return jax.lax.optimization_barrier((one(cache.k, cache.k_scale), one(cache.v, cache.v_scale)))


def write_positions(page_table_SM, position_SN, page_size, valid_SN, window=None):
  """(page, offset) of each position in its slot's page table; invalid ones go to NULL_PAGE.

  `window` (a models.inference.kv_evict.Window) maps page numbers onto sink + ring entries.
  """
  M = page_table_SM.shape[1]
  idx_SN = kv_evict.table_index(position_SN // page_size, window)
  in_range_SN = valid_SN & (idx_SN < M) & (position_SN >= 0)
  page_SN = jnp.take_along_axis(page_table_SM, jnp.clip(idx_SN, 0, M - 1), axis=1)
  page_SN = jnp.where(in_range_SN, page_SN, NULL_PAGE)
  return page_SN, position_SN % page_size


class OutOfPages(RuntimeError):
  """The pool cannot supply the pages asked for."""


def block_keys(tokens, page_size: int, root: int = 0) -> list[tuple[int, int, tuple]]:
  """(key, parent key, block tokens) of each full block: a hash chain over the blocks, from
  `root` (the prefix cache's weight epoch: K/V written by other weights never matches)."""
  parent, out = root, []
  for i in range(len(tokens) // page_size):
    block = tuple(tokens[i * page_size : (i + 1) * page_size])
    key = hash((parent, block))
    out.append((key, parent, block))
    parent = key
  return out


def matched_pages(tokens, page_size: int, find, root: int = 0) -> list[int]:
  """Pages of the longest leading run of full blocks of tokens that `find(key, parent, block)`
  returns a page for (None ends the run)."""
  pages = []
  for key, parent, block in block_keys(tokens, page_size, root):
    page = find(key, parent, block)
    if page is None:
      break
    pages.append(page)
  return pages


class PagePool:
  """Host-side page allocator with reference counts and an optional shared-prefix cache.

  Pages are reference counted so a full block of prompt tokens can be shared by many requests
  (vLLM-style automatic prefix caching, keyed by a hash chain over token blocks and verified
  token-exactly). A page whose count drops to zero returns to the free list, or, if it holds a
  cached prefix block, to an LRU of evictable pages that `alloc` reclaims last.
  Cached blocks are keyed by the weights that wrote them: `new_weights()` (every weight swap)
  starts a new epoch, the hash chain's root, and drops the older epochs' blocks, so no K/V of
  older weights is ever shared again (RL turns the cache on across weight syncs).
  Plain Python (no device work); not thread-safe on its own: the Generator owns one under a lock.
  """

  def __init__(self, num_pages: int, page_size: int, *, prefix_caching: bool = False):
    if num_pages < 2:
      raise ValueError(f"num_pages must be >= 2 (page 0 is the null page), got {num_pages}")
    self.num_pages, self.page_size, self.prefix_caching = num_pages, page_size, prefix_caching
    self._free = collections.deque(range(1, num_pages))
    self._refs = [0] * num_pages
    self._evictable: collections.OrderedDict[int, None] = collections.OrderedDict()
    self._block_of_page: dict[int, tuple] = {}  # page -> (key, parent_key, block tokens)
    self._page_of_key: dict[int, int] = {}
    self.reserved = 0
    self.epoch = 0  # weight epoch: the root of every block key

  # -- accounting -------------------------------------------------------------------------
  @property
  def num_available(self) -> int:
    """Pages that alloc can hand out (free + evictable cached) minus reservations."""
    return len(self._free) + len(self._evictable) - self.reserved

  @property
  def num_used(self) -> int:
    return self.num_pages - 1 - len(self._free) - len(self._evictable)

  @property
  def num_cached(self) -> int:
    return len(self._block_of_page)

  def reserve(self, n: int) -> bool:
    """Promises n future pages (admission control); False if they are not there."""
    if n > self.num_available:
      return False
    self.reserved += n
    return True

  def unreserve(self, n: int) -> None:
    self.reserved -= n
    assert self.reserved >= 0, "unreserve below zero"

  # -- allocation -------------------------------------------------------------------------
  def alloc(self, n: int, *, from_reserved: bool = False) -> list[int]:
    avail = len(self._free) + len(self._evictable) - (0 if from_reserved else self.reserved)
    if n > avail:
      raise OutOfPages(f"asked for {n} pages, {avail} available of {self.num_pages - 1}")
    if from_reserved:
      self.unreserve(n)
    out = []
    for _ in range(n):
      if self._free:
        page = self._free.popleft()
      else:
        page, _ = self._evictable.popitem(last=False)
        self._uncache(page)
      self._refs[page] = 1
      out.append(page)
    return out

  def retain(self, pages) -> None:
    for page in pages:
      if self._refs[page] == 0:
        self._evictable.pop(page, None)
      self._refs[page] += 1

  def release(self, pages) -> None:
    for page in pages:
      if page == NULL_PAGE:
        continue
      assert self._refs[page] > 0, f"double free of page {page}"
      self._refs[page] -= 1
      if self._refs[page] == 0:
        if page in self._block_of_page:
          self._evictable[page] = None
        else:
          self._free.append(page)

  def is_shared(self, page: int) -> bool:
    """True if writing to the page could change what another holder reads."""
    return self._refs[page] > 1 or page in self._block_of_page

  # -- shared-prefix cache ----------------------------------------------------------------
  def _cached(self, key, parent, block) -> int | None:
    """The page caching this block, verified token-exactly, else None."""
    page = self._page_of_key.get(key)
    return page if page is not None and self._block_of_page[page] == (key, parent, block) else None

  def lookup_prefix(self, tokens) -> list[int]:
    """Pages holding the longest cached run of full blocks of tokens; retains them."""
    if not self.prefix_caching:
      return []
    pages = matched_pages(tokens, self.page_size, self._cached, self.root)
    self.retain(pages)
    return pages

  @property
  def root(self) -> int:
    """The hash chain's root for this weight epoch."""
    return hash(("weights", self.epoch))

  def new_weights(self) -> None:
    """Forgets every cached block: pages already written hold the old weights' K/V. Pages in
    use stay with their holders (uncached, freed on release); evictable ones become free."""
    self.epoch += 1
    for page in list(self._block_of_page):
      self._uncache(page)
      if page in self._evictable:  # nobody holds it: free now
        del self._evictable[page]
        self._free.append(page)

  def register_prefix(self, tokens, pages) -> None:
    """Records that pages[i] holds block i of tokens (only full blocks are shared)."""
    if not self.prefix_caching:
      return
    keys = block_keys(tokens, self.page_size, self.root)
    for (key, parent, block), page in zip(keys, pages, strict=False):
      if key in self._page_of_key or page in self._block_of_page:
        continue
      self._page_of_key[key] = page
      self._block_of_page[page] = (key, parent, block)

  def _uncache(self, page):
    key = self._block_of_page.pop(page)[0]
    del self._page_of_key[key]
