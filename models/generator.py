"""Continuous-batching generator: thread-safe submit() -> Future over an Engine's decode slots.

A background thread admits requests as slots and pages free up, runs jitted decode steps over
all slots and reads each dispatch's tokens one dispatch late, so the device always has the next
work queued while the host handles the previous one (a finished request therefore costs a few
discarded tokens of compute). A dispatch is `decode_chunk` steps in one call (one host round
trip) while no running request can reach its token limit inside it, else a single step.
Pages are reserved for prompt + max_new_tokens at admission (so a running request never runs
out) but allocated as tokens arrive.

Prefix reuse: a request with a `session_id` keeps its pages after it finishes, together with the
exact tokens whose K/V they hold. The next request of the session is matched token-exactly
against them (longest common prefix) and only the rest is prefilled. With
`prefix_caching=True`, full pages of prompts are also shared across requests by content.

Per-token records: `logprobs` under the distribution the token was sampled from (see
models.sampling) and `versions`, the policy version of the weights that produced the token.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import threading
import time

import numpy as np

from models import kv_cache as kvc
from models.engine import Engine
from models.sampling import SamplingParams


@dataclasses.dataclass(frozen=True)
class GenerationRequest:
  prompt_tokens: list[int]
  max_new_tokens: int
  sampling: SamplingParams = SamplingParams()
  stop_token_ids: tuple[int, ...] = ()
  stop_strings: tuple[str, ...] = ()
  session_id: str | None = None


@dataclasses.dataclass
class GenerationResult:
  tokens: list[int]
  logprobs: list[float]
  versions: list[int]
  finish_reason: str  # 'stop' | 'length' | 'stop_string' | 'error'
  prompt_len: int
  cached_prefix_len: int


@dataclasses.dataclass
class _Session:
  pages: list[int]
  tokens: list[int]  # exactly the tokens whose K/V the pages hold


@dataclasses.dataclass
class _Live:
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


def _entry(page_no: int, window) -> int:
  """Host twin of kv_evict.table_index for one page number."""
  if window is None or page_no < window.sink:
    return page_no
  return window.sink + (page_no - window.sink) % window.ring


def _lcp(a, b) -> int:
  n = min(len(a), len(b))
  i = 0
  while i < n and a[i] == b[i]:
    i += 1
  return i


class Generator:
  """Host scheduler over an Engine (see module docstring). Call close() when done."""

  def __init__(
    self, engine: Engine, *, tokenizer=None, prefix_caching: bool = False,
    max_prefill_batch: int = 16, max_prefill_tokens: int = 4096, decode_chunk: int = 8,
    warmup: bool = True,
  ):  # fmt: skip
    """warmup: compile the full-page decode variants (every long request reaches them) on a
    background thread from the start; a dispatch whose variant is still compiling waits for
    it. Smaller page buckets compile on first use (warming them all cost more than it saved
    on 2 cores)."""
    self.engine, self.tokenizer = engine, tokenizer
    self.max_prefill_batch, self.max_prefill_tokens = max_prefill_batch, max_prefill_tokens
    self.decode_chunk = decode_chunk
    self._jobs: list[_Live] = []
    if prefix_caching and engine.window is not None:
      raise ValueError("Generator: prefix_caching cannot be combined with a KV eviction window")
    self.pool = kvc.PagePool(engine.num_pages, engine.page_size, prefix_caching=prefix_caching)
    S, M = engine.max_concurrent_decodes, engine.pages_per_slot
    self._table = np.full((S, M), kvc.NULL_PAGE, np.int32)
    self._table_dirty = False
    self._free_slots = list(range(S))
    self._live: dict[int, _Live] = {}
    self._pending: collections.deque = collections.deque()
    self._sessions: collections.OrderedDict[str, _Session] = collections.OrderedDict()
    self._events: collections.deque = collections.deque()
    self._lock = threading.Lock()
    self._wake = threading.Condition(self._lock)
    self._closed = False
    self._state = engine.init_decode_state()
    self._counters = collections.Counter()
    self._t0 = time.perf_counter()
    self._warmup = None
    if warmup:
      self._warmup = engine.warmup(
        steps=sorted({1, decode_chunk}), buckets=(None,), background=True
      )
    self._thread = threading.Thread(target=self._run, name="agentrl-generator", daemon=True)
    self._thread.start()

  # -- public API -------------------------------------------------------------------------
  def submit(self, req: GenerationRequest) -> concurrent.futures.Future:
    self._validate(req)
    fut: concurrent.futures.Future = concurrent.futures.Future()
    with self._lock:
      if self._closed:
        raise RuntimeError("Generator is closed")
      self._pending.append((req, fut))
      self._wake.notify()
    return fut

  def generate(self, reqs) -> list[GenerationResult]:
    return [f.result() for f in [self.submit(r) for r in reqs]]

  def release_session(self, session_id: str) -> None:
    with self._lock:
      sess = self._sessions.pop(session_id, None)
      if sess is not None:
        self.pool.release(sess.pages)

  def load_params(self, params, version: int) -> None:
    """Hot swap: the next dispatch uses the new weights (no recompilation)."""
    with self._lock:
      self.engine.load_params(params, version)

  def stats(self) -> dict:
    with self._lock:
      elapsed = time.perf_counter() - self._t0
      return dict(
        tokens_generated=self._counters["tokens"],
        tokens_per_s=self._counters["tokens"] / max(elapsed, 1e-9),
        decode_steps=self._counters["steps"],
        decode_dispatches=self._counters["dispatches"],
        prefills=self._counters["prefills"],
        prefill_tokens=self._counters["prefill_tokens"],
        cached_prompt_tokens=self._counters["cached_tokens"],
        active_slots=len(self._live),
        pending=len(self._pending),
        pages_used=self.pool.num_used,
        pages_free=self.pool.num_available,
        pages_cached=self.pool.num_cached,
        sessions=len(self._sessions),
        policy_version=self.engine.policy_version,
      )

  def close(self) -> None:
    with self._lock:
      self._closed = True
      self._wake.notify()
    self._thread.join()
    if self._warmup is not None:  # its compiles must not outlive the generator's owner
      self._warmup.join()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  # -- validation and admission -----------------------------------------------------------
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
      pages, c = sess.pages, _lcp(sess.tokens, prompt)
    else:
      pages = self.pool.lookup_prefix(prompt)
      c = len(pages) * p
    c = min(c, len(prompt) - 1)  # always prefill >= 1 token to get logits
    if c % p and c // p < len(pages) and self.pool.is_shared(pages[c // p]):
      c -= c % p  # never write into a page someone else reads
    keep = -(-c // p)
    self.pool.release(pages[keep:])
    return pages[:keep], c, sess

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
        self._sessions[req.session_id] = _Session(kept, list(req.prompt_tokens[:c]))
      else:
        self.pool.release(kept)
      return False
    self._jobs.append(self._start(req, fut, kept, c, need, max_new))
    return True

  def _start(self, req, fut, kept, c, need, max_new) -> _Live:
    n, p = len(req.prompt_tokens), self.engine.page_size
    slot = self._free_slots.pop()
    fresh = self.pool.alloc(
      min(-(-n // p), self.engine.pages_per_slot) - len(kept), from_reserved=True
    )
    pages = kept + fresh
    self._table[slot] = kvc.NULL_PAGE
    self._table[slot, : len(pages)] = pages
    live = _Live(req, fut, slot, pages, need - len(fresh), n, max_new, c)
    self._live[slot] = live
    self._counters.update(prefills=1, prefill_tokens=n - c, cached_tokens=c)
    return live

  def _prefill_jobs(self) -> None:
    """Prefills the requests admitted this iteration, batched by (bucket, has context).

    Requests without cached context go first; prompt blocks enter the shared-prefix cache only
    after their inserts are dispatched, so nothing reads a page before it is written.
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

  # -- the loop ---------------------------------------------------------------------------
  def _run(self) -> None:
    try:
      while self._iteration():
        pass
      err: Exception = RuntimeError("Generator closed before the request finished")
    except Exception as e:  # noqa: BLE001 - every waiting caller must hear about it
      err = e
    with self._lock:
      self._closed = True
      futs = [f for _, f in self._pending] + [lv.future for lv in self._live.values()]
      self._pending.clear()
    for f in futs:
      if not f.done():
        f.set_exception(err)

  def _iteration(self) -> bool:
    with self._lock:
      while not (self._closed or self._pending or self._live or self._events):
        self._wake.wait()
      if self._closed:
        return False
      while self._pending and self._free_slots and self._admit(*self._pending[0]):
        self._pending.popleft()
      if self._jobs:
        self._prefill_jobs()
      dispatched = bool(self._live) and self._dispatch()
    done = []
    while len(self._events) > (1 if dispatched else 0):
      done += self._process(self._events.popleft())
    for fut, res in done:
      fut.set_result(res)
    return True

  def _chunk(self, lives) -> int:
    """Steps for the next dispatch: decode_chunk or 1 (two compiled variants); 0: none needed.

    Enough to dispatch every running request's remaining tokens; while requests wait for a
    slot, only as many as keep the first slot that frees up from idling (1 if a running
    request may stop early).
    """
    # Steps each request still needs: its first token came from prefill, one per step after.
    left = [lv.max_new - 1 - (lv.written - len(lv.req.prompt_tokens)) for lv in lives]
    cap = max(left)
    if cap > 0 and self._pending:
      may_stop = any(lv.req.stop_token_ids or lv.req.stop_strings for lv in lives)
      cap = 1 if may_stop else max(min(left), 1)
    if cap <= 0:
      return 0
    if cap >= self.decode_chunk:
      return self.decode_chunk
    # A short tail: run a whole chunk anyway (its extra positions get no page and their tokens
    # are discarded) unless a waiting request needs the slot or a slot would pass the end.
    room = min(self.engine.max_seq_len - lv.written for lv in lives)
    return self.decode_chunk if not self._pending and room >= self.decode_chunk else 1

  def _dispatch(self) -> bool:
    p, lives = self.engine.page_size, list(self._live.values())
    n = self._chunk(lives)
    if n == 0:  # every running request has all its tokens dispatched
      return False
    for live in lives:
      # Positions past the request's last token hold discarded tokens: they get no page.
      end = min(live.written + n, len(live.req.prompt_tokens) + live.max_new)
      for pos in range(live.written, end):
        if _entry(pos // p, self.engine.window) >= len(live.pages):  # a step writes pos there
          (page,) = self.pool.alloc(1, from_reserved=True)
          live.reserved -= 1
          self._table[live.slot, len(live.pages)] = page
          live.pages.append(page)
          self._table_dirty = True
    if self._table_dirty:
      self._state = self.engine.set_page_table(self._state, self._table)
      self._table_dirty = False
    # Attend only over the pages that hold tokens (power-of-two buckets: few compilations).
    pages = self.engine.attention_pages(max(lv.written for lv in lives) + n)
    self._state, out = self.engine.generate(None, self._state, pages=pages, steps=n)
    for live in lives:
      live.written += n
    self._events.append(("step", out, self.engine.policy_version, lives))
    self._counters.update(steps=n, dispatches=1)
    return True

  def _process(self, event) -> list:
    """Reads one event's tokens (blocking on the device) and applies them; returns finished."""
    if event[0] == "first":
      _, lives, toks, lps, version = event
      toks, lps = np.asarray(toks), np.asarray(lps)
      pairs = [(lv, int(toks[b]), float(lps[b])) for b, lv in enumerate(lives)]
    else:
      _, out, version, snapshot = event
      toks = np.asarray(out.tokens_S).reshape(-1, self.engine.max_concurrent_decodes)
      lps = np.asarray(out.logprobs_S).reshape(toks.shape)
      pairs = [
        (lv, int(t[lv.slot]), float(lp[lv.slot]))
        for t, lp in zip(toks, lps, strict=True)
        for lv in snapshot
      ]
    done = []
    with self._lock:
      for live, tok, lp in pairs:
        if live.done:
          continue
        live.tokens.append(tok)
        live.logprobs.append(lp)
        live.versions.append(version)
        self._counters["tokens"] += 1
        reason = self._finish_reason(live, tok)
        if reason:
          done.append(self._finish(live, reason))
    return done

  def _finish_reason(self, live: _Live, tok: int) -> str | None:
    req = live.req
    if tok in req.stop_token_ids:
      return "stop"
    if req.stop_strings:
      text = self.tokenizer.decode(live.tokens)
      if any(s in text for s in req.stop_strings):
        return "stop_string"
    if len(live.tokens) >= live.max_new:
      return "length"
    return None

  def _finish(self, live: _Live, reason: str):
    live.done = True
    del self._live[live.slot]
    self._free_slots.append(live.slot)
    self._table[live.slot] = kvc.NULL_PAGE
    self._table_dirty = True
    self.pool.unreserve(live.reserved)
    req, p = live.req, self.engine.page_size
    if req.session_id is not None and self.engine.window is None:
      held = list(req.prompt_tokens) + live.tokens
      valid = min(live.written, len(held))  # steps past a stop token wrote discarded tokens
      keep = -(-valid // p)
      self.pool.release(live.pages[keep:])
      old = self._sessions.pop(req.session_id, None)
      if old is not None:
        self.pool.release(old.pages)
      self._sessions[req.session_id] = _Session(live.pages[:keep], held[:valid])
    else:
      self.pool.release(live.pages)
    res = GenerationResult(
      live.tokens, live.logprobs, live.versions, reason, len(req.prompt_tokens), live.cached
    )
    return live.future, res
