"""The generator's admission side: requests, validation, prefix reuse, slots and prefill.

`Admission` is the half of models.inference.generator.Generator that turns pending requests into live
ones: it plans prefix reuse (a session's pages, the shared-prefix cache, or the prompt pages
of a request admitted in the same round: the G samples of one prompt prefill it once),
reserves pages for prompt + max_new_tokens, takes a slot and prefills the admitted requests
batched by bucket.
Its methods run on the generator thread with the generator's lock held.
"""

from __future__ import annotations

import collections
import collections.abc
import concurrent.futures
import dataclasses

import numpy as np

from models.inference import kv_cache as kvc
from models.sampling import SamplingParams


@dataclasses.dataclass(frozen=True)
class GenerationRequest:
  prompt_tokens: list[int]
  max_new_tokens: int
  sampling: SamplingParams = SamplingParams()
  stop_token_ids: tuple[int, ...] = ()
  stop_strings: tuple[str, ...] = ()
  session_id: str | None = None
  # Called on the generator thread with each new token id as it is read back, before the
  # request's future completes (streaming); keep it short, it delays every other request.
  on_token: collections.abc.Callable[[int], None] | None = dataclasses.field(
    default=None, compare=False
  )


@dataclasses.dataclass
class GenerationResult:
  tokens: list[int]
  logprobs: list[float]
  versions: list[int]
  finish_reason: str  # 'stop' | 'length' | 'stop_string' | 'error'
  prompt_len: int
  cached_prefix_len: int


@dataclasses.dataclass
class Session:
  pages: list[int]
  tokens: list[int]  # exactly the tokens whose K/V the pages hold


@dataclasses.dataclass
class Live:
  req: GenerationRequest
  future: concurrent.futures.Future
  slot: int
  pages: list[int]
  reserved: int
  written: int  # positions whose K/V is written by dispatched work
  max_new: int
  cached: int
  tokens: list[int] = dataclasses.field(default_factory=list)
  logprobs: list[float] = dataclasses.field(default_factory=list)
  versions: list[int] = dataclasses.field(default_factory=list)
  done: bool = False


def page_entry(page_no: int, window) -> int:
  """Host twin of kv_evict.table_index for one page number."""
  if window is None or page_no < window.sink:
    return page_no
  return window.sink + (page_no - window.sink) % window.ring


def common_prefix_len(a, b) -> int:
  n = min(len(a), len(b))
  i = 0
  while i < n and a[i] == b[i]:
    i += 1
  return i


class Admission:
  """Admission half of Generator (see models.inference.generator); needs its engine, pool and tables."""

  def _validate(self, req: GenerationRequest) -> None:
    n, max_len = len(req.prompt_tokens), self.engine.max_seq_len
    if n == 0:
      raise ValueError("GenerationRequest.prompt_tokens is empty")
    if n >= max_len:
      raise ValueError(
        f"GenerationRequest: prompt of {n} tokens leaves no room in max_seq_len {max_len}"
      )
    if req.max_new_tokens < 1:
      raise ValueError(f"GenerationRequest.max_new_tokens must be >= 1 (got {req.max_new_tokens})")
    if req.stop_strings and self.tokenizer is None:
      raise ValueError("GenerationRequest.stop_strings needs Generator(tokenizer=...)")
    p, M = self.engine.page_size, self.engine.pages_per_slot
    if min(-(-min(n + req.max_new_tokens, max_len) // p), M) > self.engine.num_pages - 1:
      raise ValueError(
        f"GenerationRequest needs more pages than the engine has ({self.engine.num_pages - 1})"
      )
    vocab = self.engine.cfg.vocab_size
    if min(req.prompt_tokens) < 0 or max(req.prompt_tokens) >= vocab:
      raise ValueError(f"GenerationRequest.prompt_tokens has ids outside [0, {vocab})")

  def _plan_reuse(self, req):
    """(pages to keep, cached length, session) from the request's session or the prefix cache."""
    prompt, p = req.prompt_tokens, self.engine.page_size
    if self.engine.window is not None:  # evicted pages cannot be reused token-exactly
      return [], 0, None
    sess = self._sessions.pop(req.session_id, None) if req.session_id else None
    if sess is not None:
      pages, c = sess.pages, common_prefix_len(sess.tokens, prompt)
    else:
      pages = self.pool.lookup_prefix(prompt)
      shared = self._round_pages(prompt)
      if len(shared) > len(pages):  # a request admitted this round prefills a longer prefix
        self.pool.release(pages)
        self.pool.retain(shared)
        pages = shared
      c = len(pages) * p
    c = min(c, len(prompt) - 1)  # always prefill >= 1 token to get logits
    if c % p and c // p < len(pages) and self.pool.is_shared(pages[c // p]):
      c -= c % p  # never write into a page someone else reads
    keep = -(-c // p)
    self.pool.release(pages[keep:])
    return pages[:keep], c, sess

  def _round_pages(self, prompt) -> list[int]:
    """Pages of the longest run of full prompt blocks that this round's prefills will write."""
    if not self._round_blocks:
      return []

    def find(key, parent, block):  # token-exact, as the prefix cache
      hit = self._round_blocks.get(key)
      return hit[0] if hit is not None and hit[1:] == (parent, block) else None

    return kvc.matched_pages(prompt, self.engine.page_size, find)

  def _admit(self, req, fut) -> bool:
    """Starts a request in a free slot; False (and nothing changed) if pages are short."""
    kept, c, sess = self._plan_reuse(req)
    n, p = len(req.prompt_tokens), self.engine.page_size
    max_new = min(req.max_new_tokens, self.engine.max_seq_len - n)
    need = min(-(-(n + max_new) // p), self.engine.pages_per_slot) - len(kept)
    ok = self.pool.reserve(need)
    while not ok and self._sessions:
      _, old = self._sessions.popitem(last=False)  # evict the least recently used session
      self.pool.release(old.pages)
      ok = self.pool.reserve(need)
    if not ok:
      if sess is not None:  # keep what is still valid for the next try
        self._sessions[req.session_id] = Session(kept, list(req.prompt_tokens[:c]))
      else:
        self.pool.release(kept)
      return False
    self._jobs.append(self._start(req, fut, kept, c, need, max_new))
    return True

  def _start(self, req, fut, kept, c, need, max_new) -> Live:
    n, p = len(req.prompt_tokens), self.engine.page_size
    slot = self._free_slots.pop()
    fresh = self.pool.alloc(
      min(-(-n // p), self.engine.pages_per_slot) - len(kept), from_reserved=True
    )
    pages = kept + fresh
    self._table[slot] = kvc.NULL_PAGE
    self._table[slot, : len(pages)] = pages
    live = Live(req, fut, slot, pages, need - len(fresh), n, max_new, c)
    if self.share_prompts and c == 0 and self.engine.window is None:
      # Its prefill runs before any with context (see _prefill_jobs), so a later request of
      # this round with the same leading blocks (GRPO's G samples) can read these pages.
      for i, (key, parent, block) in enumerate(kvc.block_keys(req.prompt_tokens, p)):
        self._round_blocks.setdefault(key, (pages[i], parent, block))
    self._live[slot] = live
    self._counters.update(prefills=1, prefill_tokens=n - c, cached_tokens=c)
    return live

  def _prefill_jobs(self) -> None:
    """Prefills the requests admitted this iteration, batched by (bucket, has context).

    Requests without cached context go first (among them the ones whose prompt blocks other
    requests of this round share); prompt blocks enter the shared-prefix cache only after
    their inserts are dispatched, so nothing reads a page before it is written.
    """
    eng, groups = self.engine, collections.defaultdict(list)
    for live in self._jobs:
      groups[(live.cached > 0, eng.bucket(len(live.req.prompt_tokens) - live.cached))].append(live)
    for (has_ctx, T), lives in sorted(groups.items()):
      per_call = max(1, min(self.max_prefill_batch, self.max_prefill_tokens // T))
      for i in range(0, len(lives), per_call):
        self._prefill_batch(lives[i : i + per_call], T, has_ctx)
    for live in self._jobs:
      self.pool.register_prefix(live.req.prompt_tokens, live.pages)
    self._jobs.clear()
    self._round_blocks.clear()

  def _prefill_batch(self, lives, T, has_ctx) -> None:
    eng, S = self.engine, self.engine.max_concurrent_decodes
    B = 1
    while B < len(lives):
      B *= 4  # few distinct batch shapes -> few compilations
    B = min(B, max(S, len(lives)))
    tokens = np.zeros((B, T), np.int32)
    start, true_len = np.zeros(B, np.int32), np.ones(B, np.int32)
    slots = np.full(B, S, np.int32)  # out of range: padding rows are dropped by insert
    rows = np.full((B, eng.pages_per_slot), kvc.NULL_PAGE, np.int32)
    for b, live in enumerate(lives):
      m = len(live.req.prompt_tokens) - live.cached
      tokens[b, :m] = live.req.prompt_tokens[live.cached :]
      start[b], true_len[b], slots[b] = live.cached, m, live.slot
      rows[b] = self._table[live.slot]
    samp = [lv.req.sampling for lv in lives] + [SamplingParams(greedy=True)] * (B - len(lives))
    prefix = eng.prefill(
      padded_tokens=tokens, true_length=true_len, sampling=samp, start=start,
      context=(self._state, rows) if has_ctx else None,
    )  # fmt: skip
    self._state = eng.insert(prefix, self._state, slots, rows)
    self._events.append(("first", lives, prefix.token_B, prefix.logprob_B, eng.policy_version))
