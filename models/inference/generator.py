"""Continuous-batching generator: thread-safe submit() -> Future over an Engine's decode slots.

A background thread admits requests as slots and pages free up, runs jitted decode steps over
all slots and reads each dispatch's tokens one dispatch late, so the device always has the next
work queued while the host handles the previous one (a finished request therefore costs a few
discarded tokens of compute). A dispatch is `decode_chunk` steps in one call (one host round
trip) while no running request can reach its token limit inside it, else a single step.
Pages are reserved for prompt + max_new_tokens at admission (so a running request never runs
out) but allocated as tokens arrive. Admission (validation, prefix reuse, slots, batched
prefill) is models.inference.generator_admission; this module is the loop and the chunked dispatch.

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
import logging
import threading
import time

import numpy as np

from models.inference import kv_cache as kvc
from models.inference.engine import Engine
from models.inference.generator_admission import (
  Admission,
  GenerationRequest,
  GenerationResult,
  Live,
  Session,
  page_entry,
)

__all__ = ["Admission", "GenerationRequest", "GenerationResult", "Generator"]


class Generator(Admission):
  """Host scheduler over an Engine (see module docstring). Call close() when done."""

  def __init__(
    self, engine: Engine, *, tokenizer=None, prefix_caching: bool = False,
    max_prefill_batch: int = 16, max_prefill_tokens: int = 4096, decode_chunk: int = 8,
    warmup: bool = True, share_prompts: bool = True,
  ):  # fmt: skip
    """share_prompts: requests admitted together that start with the same full pages of prompt
    (n samples of one prompt) prefill those pages once and share them; the others prefill only
    the rest, with the shared pages as context.
    warmup: compile the full-page decode variants (every long request reaches them) on a
    background thread from the start; a dispatch whose variant is still compiling waits for
    it. Smaller page buckets compile on first use (warming them all cost more than it saved
    on 2 cores)."""
    self.engine, self.tokenizer = engine, tokenizer
    self.max_prefill_batch, self.max_prefill_tokens = max_prefill_batch, max_prefill_tokens
    self.decode_chunk = decode_chunk
    self._jobs: list[Live] = []
    self.share_prompts = share_prompts
    self._round_blocks: dict[int, tuple] = {}  # block key -> (page, parent key, block tokens)
    if prefix_caching and engine.window is not None:
      raise ValueError("Generator: prefix_caching cannot be combined with a KV eviction window")
    self.pool = kvc.PagePool(engine.num_pages, engine.page_size, prefix_caching=prefix_caching)
    S, M = engine.max_concurrent_decodes, engine.pages_per_slot
    self._table = np.full((S, M), kvc.NULL_PAGE, np.int32)
    self._table_dirty = False
    self._free_slots = list(range(S))
    self._live: dict[int, Live] = {}
    self._pending: collections.deque = collections.deque()
    self._sessions: collections.OrderedDict[str, Session] = collections.OrderedDict()
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
      self.pool.new_weights()  # the prefix cache's pages hold the old weights' K/V

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
        if page_entry(pos // p, self.engine.window) >= len(live.pages):  # a step writes pos there
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
    done, calls = [], []
    with self._lock:
      for live, tok, lp in pairs:
        if live.done:
          continue
        live.tokens.append(tok)
        live.logprobs.append(lp)
        live.versions.append(version)
        self._counters["tokens"] += 1
        if live.req.on_token is not None:
          calls.append((live.req.on_token, tok))
        reason = self._finish_reason(live, tok)
        if reason:
          done.append(self._finish(live, reason))
    for fn, tok in calls:  # outside the lock: a callback may call back into the generator
      try:
        fn(tok)
      except Exception:  # noqa: BLE001 - a broken listener must not fail the other requests
        logging.getLogger(__name__).exception("GenerationRequest.on_token raised")
    return done

  def _finish_reason(self, live: Live, tok: int) -> str | None:
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

  def _finish(self, live: Live, reason: str):
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
      self._sessions[req.session_id] = Session(live.pages[:keep], held[:valid])
    else:
      self.pool.release(live.pages)
    res = GenerationResult(
      live.tokens, live.logprobs, live.versions, reason, len(req.prompt_tokens), live.cached
    )
    return live.future, res
