"""Weight swaps under running episodes: the KV-cache policy, over the Generator's public API.

An async run loads new weights while episodes are mid-way. Their tokens keep coming (an episode
is never stopped by a sync); the question is which K/V the next tokens attend over.

  * "keep" (the plain Generator): the swap applies at the next decode dispatch, and requests in
    flight, and later turns of a session (prefix reuse), attend over K/V written by the old
    weights. A token tagged version v then has a behaviour log-prob that is neither pi_v's nor
    pi_{v-1}'s: decoupled PPO's weight pi_prox / pi_behave is still the right importance
    weight (the token was sampled from that mixture), but the tag no longer names the policy.
  * "reprefill" (`ExactSwap`, the default): a swap waits until the requests in flight finish
    (new requests wait for the swap), and a session whose K/V was written by older weights is
    released, so its next turn prefills the whole context under the new weights. Every token
    is then sampled from exactly the policy version it is tagged with, and its behaviour
    log-prob is that version's, recomputed from scratch (tests/test_async_kv.py).

Cost of "reprefill": a swap waits at most one turn of generation (the trainer does not:
`load_params` returns at once and the swap happens when the last request in flight finishes),
and the first turn of each session after a swap prefills its whole context
(`reprefilled_sessions`, `prefill_tokens` in `stats()`); benchmarks/async_vs_sync.py measures
both policies (mismatch and cost) and benchmarks/RESULTS.md records them.

The Generator's shared-prefix cache composes with both: its blocks are keyed by the weights
that wrote them (`PagePool.new_weights` on every swap), so a request after a swap never reads
a cached page of older weights (tests/test_async_kv.py).
"""

from __future__ import annotations

import threading
import time


class ExactSwap:
  """A Generator whose weight swaps never split a request or reuse older weights' K/V."""

  def __init__(self, generator):
    self.gen = generator
    self.version = generator.engine.policy_version
    self._cv = threading.Condition()
    self._inflight = 0
    self._pending = None  # (params, version, requested at) waiting for in-flight requests
    self._session_version: dict[str, int] = {}
    self.swaps = self.reprefilled_sessions = 0
    self.swap_wait_s = 0.0  # summed: load_params -> weights applied

  def __getattr__(self, name):  # the rest of the Generator API (engine, pool, tokenizer, ...)
    return getattr(self.gen, name)

  def submit(self, req):
    with self._cv:
      while self._pending is not None:  # a swap is due: it goes first
        self._cv.wait()
      sid = req.session_id
      if sid is not None:
        if self._session_version.get(sid, self.version) != self.version:
          self.gen.release_session(sid)  # its K/V is older weights': prefill it again
          self.reprefilled_sessions += 1
        self._session_version[sid] = self.version
      self._inflight += 1
    try:
      fut = self.gen.submit(req)
    except BaseException:
      self._done(None)
      raise
    fut.add_done_callback(self._done)
    return fut

  def generate(self, reqs):
    return [f.result() for f in [self.submit(r) for r in reqs]]

  def release_session(self, session_id: str) -> None:
    with self._cv:
      self._session_version.pop(session_id, None)
    self.gen.release_session(session_id)

  def load_params(self, params, version: int) -> None:
    """Applies now if nothing is in flight, else when the last request in flight finishes."""
    with self._cv:
      self._pending = (params, version, time.monotonic())
      if self._inflight == 0:
        self._apply()

  def wait_swapped(self, timeout: float | None = None) -> bool:
    """True once no swap is pending (tests and shutdown)."""
    with self._cv:
      return self._cv.wait_for(lambda: self._pending is None, timeout)

  def _done(self, _fut) -> None:
    with self._cv:
      self._inflight -= 1
      if self._inflight == 0 and self._pending is not None:
        self._apply()

  def _apply(self) -> None:  # lock held
    params, version, t0 = self._pending
    self.gen.load_params(params, version)
    self._pending, self.version = None, version
    self.swaps += 1
    self.swap_wait_s += time.monotonic() - t0
    self._cv.notify_all()

  def stats(self) -> dict:
    with self._cv:
      extra = dict(
        swaps=self.swaps,
        swap_wait_s=self.swap_wait_s,
        reprefilled_sessions=self.reprefilled_sessions,
        swap_pending=self._pending is not None,
      )
    return {**self.gen.stats(), **extra}

  def close(self) -> None:
    with self._cv:
      self._pending = None  # nobody will train on what a closing generator makes
      self._cv.notify_all()
    self.gen.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
