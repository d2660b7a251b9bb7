"""The gateway's core (no HTTP): OpenAI requests -> engine requests -> OpenAI responses.

`policy` has the Generator API (models.inference.generator: thread-safe `submit(req) -> Future`,
`release_session`); its single engine thread batches every client's requests continuously
over the decode slots, so concurrent HTTP clients share them. Requests made under an episode
(`open_episode`) are recorded token-exactly (envs.gateway.capture) and use the episode as the
engine session, so each turn prefills only its new tokens (prefix reuse).
"""

from __future__ import annotations

import asyncio
import collections
import secrets
import threading
import time
import uuid

import envs.gateway.chat as chat_lib
import envs.gateway.protocol as protocol
import envs.gateway.scoring as scoring
from envs.agents.tool_format import TOOL_CALL_CLOSE
from envs.gateway.capture import Call, EpisodeCapture
from models.inference.generator import GenerationRequest
from models.sampling import SamplingParams


class Gateway:
  """See module docstring. Thread-safe; the HTTP layer is envs.gateway.server."""

  def __init__(self, policy, tokenizer, *, model_name: str = "agentrl", max_tokens: int = 256,
               max_seq_len: int | None = None, timeout_s: float = 600.0):  # fmt: skip
    self.policy, self.tokenizer, self.model_name = policy, tokenizer, model_name
    self.default_max_tokens, self.timeout_s = max_tokens, timeout_s
    self.engine = getattr(policy, "engine", None)
    self.max_seq_len = max_seq_len or (self.engine.max_seq_len if self.engine else 1 << 20)
    self.renderer = chat_lib.ChatRenderer(tokenizer)
    self.stop_ids = tuple(getattr(tokenizer, "stop_ids", (tokenizer.eos_id,)))
    self._episodes: dict[str, EpisodeCapture] = {}
    self._lock = threading.Lock()
    self.counters: collections.Counter = collections.Counter()

  # -- episodes -----------------------------------------------------------------------------
  def open_episode(self, episode_id: str) -> EpisodeCapture:
    with self._lock:
      if episode_id in self._episodes:
        raise ValueError(f"episode {episode_id!r} is already open")
      cap = self._episodes[episode_id] = EpisodeCapture(episode_id)
    return cap

  def close_episode(self, episode_id: str) -> EpisodeCapture:
    """Stops recording (later calls get 404) and frees the episode's engine session."""
    with self._lock:
      cap = self._episodes.pop(episode_id)
    self.policy.release_session(episode_id)
    return cap

  @property
  def episode_ids(self) -> list[str]:
    """The episodes open now."""
    with self._lock:
      return list(self._episodes)

  def capture(self, episode_id: str | None) -> EpisodeCapture | None:
    """The open episode's capture (None outside episodes); 404 error if it is not open."""
    if episode_id is None:
      return None
    with self._lock:
      cap = self._episodes.get(episode_id)
    if cap is None:
      raise protocol.RequestError(
        f"episode {episode_id!r} is not open", "episode", status=404, code="episode_not_found"
      )
    return cap

  def _check_model(self, model: str) -> None:
    if model != self.model_name:
      raise protocol.RequestError(
        f"model {model!r} does not exist (served: {self.model_name!r})", "model", status=404,
        code="model_not_found",
      )  # fmt: skip

  def models(self) -> dict:
    card = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentrl"}
    return {"object": "list", "data": [card]}

  def stats(self) -> dict:
    out = dict(self.counters)
    if hasattr(self.policy, "stats"):
      out.update(self.policy.stats())
    return out

  # -- generation ---------------------------------------------------------------------------
  async def _generate(self, prompt, s: protocol.Sampling, stops, session, param: str, stream=None):
    """The s.n results of one prompt (engine requests submitted together); an active `stream`
    (envs.gateway.streaming) gets each token as it is produced."""
    room = self.max_seq_len - len(prompt)
    if room < 1:
      raise protocol.RequestError(
        f"the prompt is {len(prompt)} tokens; the context is {self.max_seq_len}", param,
        code="context_length_exceeded",
      )  # fmt: skip
    if s.max_tokens is not None and s.max_tokens > room:
      raise protocol.RequestError(
        f"max_tokens {s.max_tokens} + prompt {len(prompt)} tokens exceed the context of "
        f"{self.max_seq_len}", "max_tokens", code="context_length_exceeded",
      )  # fmt: skip
    max_new = min(s.max_tokens or self.default_max_tokens, room)
    base = s.seed if s.seed is not None else secrets.randbits(31)
    reqs = [
      GenerationRequest(
        prompt_tokens=list(prompt),
        max_new_tokens=max_new,
        sampling=SamplingParams(
          temperature=s.temperature or 1.0,
          top_p=s.top_p,
          greedy=s.temperature == 0.0,
          seed=(base + i) & 0x7FFFFFFF,
        ),  # fmt: skip
        stop_token_ids=() if s.ignore_eos else self.stop_ids,
        stop_strings=tuple(stops),
        session_id=session if s.n == 1 else None,
        on_token=stream.on_token if stream is not None and stream.active else None,
      )
      for i in range(s.n)
    ]
    try:
      futs = [asyncio.wrap_future(self.policy.submit(r)) for r in reqs]
    except ValueError as e:
      raise protocol.RequestError(str(e), param) from None
    if stream is not None:
      stream.started.set()
    self.counters["engine_requests"] += len(futs)
    t0 = time.monotonic()
    try:
      results = await asyncio.wait_for(asyncio.gather(*futs), self.timeout_s)
    except asyncio.TimeoutError:
      raise protocol.RequestError(
        "generation timed out", None, status=504, kind="server_error"
      ) from None
    except Exception as e:  # a failed engine is a server error, not the client's
      raise protocol.RequestError(
        f"engine error: {e}", None, status=500, kind="server_error"
      ) from None
    if any(r.finish_reason == "error" for r in results):
      raise protocol.RequestError("engine returned an error", None, status=500, kind="server_error")
    return results, reqs, time.monotonic() - t0

  def _text(self, res, user_stops, keep_close: bool) -> tuple[str, str]:
    """(text, finish reason) of one result with OpenAI stop semantics (stop strings cut)."""
    toks = res.tokens
    if res.finish_reason == "stop" and toks and toks[-1] in self.stop_ids:
      toks = toks[:-1]
    text = self.tokenizer.decode(toks)
    cut = min([i for i in (text.find(s) for s in user_stops) if i >= 0], default=-1)
    if cut >= 0:
      return text[:cut], "stop"
    if keep_close and res.finish_reason == "stop_string" and TOOL_CALL_CLOSE in text:
      text = text[: text.find(TOOL_CALL_CLOSE) + len(TOOL_CALL_CLOSE)]
    return text, "length" if res.finish_reason == "length" else "stop"

  def _token_logprobs(self, prompt, res, req, k: int):
    """Per completion token: (token str, logprob, [(alt str, alt logprob)])."""
    tops = [([], [])] * len(res.tokens)
    if k:
      if self.engine is None:
        raise protocol.RequestError("top_logprobs needs a model engine", "top_logprobs")
      tops = scoring.top_logprobs(
        self.engine.params, self.engine.cfg, prompt, res.tokens, req.sampling, k
      )
    dec = lambda t: self.tokenizer.decode([t])
    return [
      (dec(t), lp, [(dec(a), alp) for a, alp in zip(*top, strict=True)])
      for t, lp, top in zip(res.tokens, res.logprobs, tops, strict=True)
    ]

  def _record(self, cap, prompt, res, text, tool, gen_s) -> None:
    if cap is not None:
      cap.record(
        Call(tuple(prompt), tuple(res.tokens), tuple(res.logprobs), tuple(res.versions),
             res.finish_reason, text, tool, gen_s)
      )  # fmt: skip
      self.counters["episode_calls"] += 1

  # -- chat -----------------------------------------------------------------------------------
  def _chat_prompt(self, norm, cap) -> tuple[list[int], bool]:
    """(prompt tokens, continued): the previous reply's exact tokens + the new text, if any."""
    for prev, toks in cap.heads() if cap is not None else ():
      delta = self.renderer.continuation(prev, norm)
      if delta is None:
        continue
      stop_text = self.tokenizer.decode([toks[-1]]) if toks and toks[-1] in self.stop_ids else ""
      if stop_text and delta.startswith(stop_text):
        delta = delta[len(stop_text) :]
      return list(toks) + self.tokenizer.encode(delta), True
    return self.tokenizer.encode(self.renderer.render(norm)), False

  async def chat(self, body, episode_id: str | None = None, stream=None) -> dict:
    """The chat.completion response; `_pieces` (per choice) lets the server stream it whole,
    and a `stream` (envs.gateway.streaming.TokenStream) gets one tool-free choice's tokens live."""
    req = protocol.parse_chat(body)
    self._check_model(req.model)
    cap = self.capture(episode_id)
    use_tools = bool(req.tools) and req.tool_choice != "none"
    norm = self.renderer.normalize(req.messages, req.tools)
    prompt, continued = self._chat_prompt(norm, cap)
    self.counters["chat_requests"] += 1
    self.counters["continued_prompts"] += int(continued)
    stops = list(req.sampling.stop) + ([TOOL_CALL_CLOSE] if use_tools else [])
    if stream is not None and req.sampling.n == 1 and not use_tools:
      stream.attach(req.sampling.stop)
    results, reqs, gen_s = await self._generate(
      prompt, req.sampling, stops, episode_id, "messages", stream
    )
    names = {t["name"] for t in req.tools}
    choices, pieces, heads = [], [], []
    for i, (res, r) in enumerate(zip(results, reqs, strict=True)):
      text, finish = self._text(res, req.sampling.stop, use_tools)
      content, calls = chat_lib.parse_tool_calls(text, names) if use_tools else (text, [])
      msg = {"role": "assistant", "content": content if content or not calls else None}
      if calls:
        msg["tool_calls"], finish = calls, "tool_calls"
      choice = {"index": i, "message": msg, "logprobs": None, "finish_reason": finish}
      if req.logprobs:
        choice["logprobs"] = {"content": [
          {"token": t, "logprob": lp, "bytes": list(t.encode()),
           "top_logprobs": [{"token": a, "logprob": alp, "bytes": list(a.encode())} for a, alp in alts]}
          for t, lp, alts in self._token_logprobs(prompt, res, r, req.top_logprobs)
        ]}  # fmt: skip
      choices.append(choice)
      pieces.append(self._pieces(res.tokens, content or ""))
      heads.append((norm + self.renderer.normalize([msg]), tuple(prompt) + tuple(res.tokens)))
      self._record(cap, prompt, res, text, calls[0]["function"]["name"] if calls else None, gen_s)
    if cap is not None:
      cap.set_heads(heads)
    return {
      "id": f"chatcmpl-{uuid.uuid4().hex}",
      "object": "chat.completion",
      "created": int(time.time()),
      "model": self.model_name,
      "choices": choices,
      "usage": self._usage(len(prompt), results),
      "_pieces": pieces,
    }

  def _pieces(self, tokens, content: str) -> list[str]:
    """`content` split at token boundaries (for streaming); multi-byte tokens merge."""
    out, prev = [], ""
    for i in range(len(tokens)):
      cur = self.tokenizer.decode(tokens[: i + 1])[: len(content)]
      if cur.endswith("\ufffd") or not cur.startswith(prev) or cur == prev:
        continue
      out.append(cur[len(prev) :])
      prev = cur
    if prev != content:
      out.append(content[len(prev) :])
    return out

  @staticmethod
  def _usage(n_prompt: int, results) -> dict:
    c = sum(len(r.tokens) for r in results)
    return {"prompt_tokens": n_prompt, "completion_tokens": c, "total_tokens": n_prompt + c}

  # -- completions ----------------------------------------------------------------------------
  async def completions(self, body, episode_id: str | None = None, stream=None) -> dict:
    req = protocol.parse_completion(body)
    self._check_model(req.model)
    cap = self.capture(episode_id)
    self.counters["completion_requests"] += 1
    prompts = [self.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in req.prompts]
    one = len(prompts) == 1
    if stream is not None and one and req.sampling.n == 1:
      stream.attach(req.sampling.stop)
    outs = await asyncio.gather(
      *(self._generate(p, req.sampling, req.sampling.stop, episode_id if one else None,
                       "prompt", stream) for p in prompts)
    )  # fmt: skip
    choices, pieces, n_prompt, n_done = [], [], 0, []
    for prompt, (results, reqs, gen_s) in zip(prompts, outs, strict=True):
      n_prompt += len(prompt)
      n_done += results
      for res, r in zip(results, reqs, strict=True):
        text, finish = self._text(res, req.sampling.stop, False)
        lp = None
        if req.logprobs is not None:
          rows = self._token_logprobs(prompt, res, r, req.logprobs)
          offsets = [len(self.tokenizer.decode(res.tokens[:j])) for j in range(len(res.tokens))]
          lp = {
            "tokens": [t for t, _, _ in rows],
            "token_logprobs": [x for _, x, _ in rows],
            "top_logprobs": [dict(alts) for _, _, alts in rows] if req.logprobs else None,
            "text_offset": offsets,
          }
        choices.append(
          {"index": len(choices), "text": text, "logprobs": lp, "finish_reason": finish}
        )
        pieces.append(self._pieces(res.tokens, text))
        self._record(cap, prompt, res, text, None, gen_s)
    return {
      "id": f"cmpl-{uuid.uuid4().hex}",
      "object": "text_completion",
      "created": int(time.time()),
      "model": self.model_name,
      "choices": choices,
      "usage": self._usage(n_prompt, n_done),
      "_pieces": pieces,
    }
