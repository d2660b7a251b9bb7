"""OpenAI request validation: JSON bodies -> frozen requests, or a RequestError naming the field.

Only what the gateway can honour is accepted; a parameter it cannot honour (a non-zero
presence penalty, `echo`) is rejected by name rather than silently ignored. Unknown fields
are ignored, as OpenAI-compatible servers do (clients send `user`, `metadata`, ...).
"""

from __future__ import annotations

import dataclasses
import json
import math

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_N = 64
MAX_TOP_LOGPROBS = 20


class RequestError(ValueError):
  """A bad request; `body()` is the OpenAI error object."""

  def __init__(self, message: str, param: str | None = None, *, status: int = 400,
               kind: str = "invalid_request_error", code: str | None = None):  # fmt: skip
    super().__init__(message)
    self.message, self.param, self.status, self.kind, self.code = message, param, status, kind, code

  def body(self) -> dict:
    err = {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}
    return {"error": err}


@dataclasses.dataclass(frozen=True)
class Sampling:
  """The sampling fields shared by both endpoints."""

  temperature: float = 1.0
  top_p: float = 1.0
  max_tokens: int | None = None
  stop: tuple[str, ...] = ()
  n: int = 1
  seed: int | None = None
  stream: bool = False
  include_usage: bool = False
  ignore_eos: bool = False  # vLLM's extension: generate max_tokens tokens


@dataclasses.dataclass(frozen=True)
class ChatRequest:
  model: str
  messages: tuple[dict, ...]
  sampling: Sampling
  logprobs: bool = False
  top_logprobs: int = 0
  tools: tuple[dict, ...] = ()  # the "function" objects
  tool_choice: str = "auto"  # none | auto (required / named are treated as auto)


@dataclasses.dataclass(frozen=True)
class CompletionRequest:
  model: str
  prompts: tuple[str | tuple[int, ...], ...]
  sampling: Sampling
  logprobs: int | None = None  # top-k alternatives per token (0: only the sampled token)


def _num(body, name, default, lo, hi, *, lo_open=False):
  v = body.get(name, default)
  if v is None:
    return default
  if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
    raise RequestError(f"{name} must be a number (got {json.dumps(v)})", name)
  if v < lo or v > hi or (lo_open and v == lo):
    lo_s = f"({lo}" if lo_open else f"[{lo}"
    raise RequestError(f"{name} must be in {lo_s}, {hi}] (got {v})", name)
  return float(v)


def _int(body, name, default, lo, hi=None):
  v = body.get(name, default)
  if v is None:
    return default
  if isinstance(v, bool) or not isinstance(v, int):
    raise RequestError(f"{name} must be an integer (got {json.dumps(v)})", name)
  if v < lo or (hi is not None and v > hi):
    raise RequestError(
      f"{name} must be in [{lo}, {hi if hi is not None else 'inf'}] (got {v})", name
    )
  return v


def _bool(body, name, default=False):
  v = body.get(name, default)
  if v is None:
    return default
  if not isinstance(v, bool):
    raise RequestError(f"{name} must be a boolean (got {json.dumps(v)})", name)
  return v


def _sampling(body: dict) -> Sampling:
  for name in ("presence_penalty", "frequency_penalty"):
    if _num(body, name, 0.0, -2.0, 2.0) != 0.0:
      raise RequestError(f"{name} is not supported (only 0)", name)
  if body.get("logit_bias"):
    raise RequestError("logit_bias is not supported", "logit_bias")
  stop = body.get("stop")
  if stop is None:
    stop = []
  elif isinstance(stop, str):
    stop = [stop]
  if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
    raise RequestError("stop must be a non-empty string or a list of up to 4 of them", "stop")
  name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
  opts = body.get("stream_options") or {}
  if not isinstance(opts, dict):
    raise RequestError("stream_options must be an object", "stream_options")
  seed = body.get("seed")
  if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
    raise RequestError(f"seed must be an integer (got {json.dumps(seed)})", "seed")
  return Sampling(
    temperature=_num(body, "temperature", 1.0, 0.0, 2.0),
    top_p=_num(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
    max_tokens=_int(body, name, None, 1),
    stop=tuple(stop),
    n=_int(body, "n", 1, 1, MAX_N),
    seed=seed,
    stream=_bool(body, "stream"),
    include_usage=_bool(opts, "include_usage"),
    ignore_eos=_bool(body, "ignore_eos"),
  )


def _model(body: dict) -> str:
  m = body.get("model")
  if not isinstance(m, str) or not m:
    raise RequestError("model must be a non-empty string", "model")
  return m


def content_text(content, param: str) -> str:
  """A message content (a string or a list of text parts) as one string."""
  if content is None:
    return ""
  if isinstance(content, str):
    return content
  if isinstance(content, list):
    out = []
    for i, part in enumerate(content):
      if (
        not isinstance(part, dict)
        or part.get("type") != "text"
        or not isinstance(part.get("text"), str)
      ):
        raise RequestError(
          f"{param}[{i}] must be a text part (only text is supported)", f"{param}[{i}]"
        )
      out.append(part["text"])
    return "".join(out)
  raise RequestError(f"{param} must be a string or a list of text parts", param)


def _messages(body: dict) -> tuple[dict, ...]:
  msgs = body.get("messages")
  if not isinstance(msgs, list) or not msgs:
    raise RequestError("messages must be a non-empty list", "messages")
  for i, m in enumerate(msgs):
    if not isinstance(m, dict):
      raise RequestError(f"messages[{i}] must be an object", f"messages[{i}]")
    if m.get("role") not in ROLES:
      raise RequestError(
        f"messages[{i}].role must be one of {', '.join(ROLES)} (got {json.dumps(m.get('role'))})",
        f"messages[{i}].role",
      )
    content_text(m.get("content"), f"messages[{i}].content")
    calls = m.get("tool_calls") or []
    if not isinstance(calls, list):
      raise RequestError(f"messages[{i}].tool_calls must be a list", f"messages[{i}].tool_calls")
    for j, c in enumerate(calls):
      fn = c.get("function") if isinstance(c, dict) else None
      if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        p = f"messages[{i}].tool_calls[{j}].function"
        raise RequestError(f"{p} must be an object with a string name", p)
  return tuple(msgs)


def _tools(body: dict) -> tuple[dict, ...]:
  tools = body.get("tools") or []
  if not isinstance(tools, list):
    raise RequestError("tools must be a list", "tools")
  out = []
  for i, t in enumerate(tools):
    fn = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
      raise RequestError(
        f'tools[{i}] must be {{"type": "function", "function": {{"name": ...}}}}', f"tools[{i}]"
      )
    out.append(fn)
  return tuple(out)


def parse_chat(body) -> ChatRequest:
  if not isinstance(body, dict):
    raise RequestError("the request body must be a JSON object")
  logprobs = _bool(body, "logprobs")
  top = _int(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
  if top and not logprobs:
    raise RequestError("top_logprobs needs logprobs: true", "top_logprobs")
  choice = body.get("tool_choice", "auto")
  if isinstance(choice, dict):
    choice = "auto"
  if choice not in ("none", "auto", "required"):
    raise RequestError(
      "tool_choice must be none, auto, required or a named function", "tool_choice"
    )
  return ChatRequest(
    model=_model(body),
    messages=_messages(body),
    sampling=_sampling(body),
    logprobs=logprobs,
    top_logprobs=top,
    tools=_tools(body),
    tool_choice="none" if choice == "none" else "auto",
  )


def parse_completion(body) -> CompletionRequest:
  if not isinstance(body, dict):
    raise RequestError("the request body must be a JSON object")
  if _bool(body, "echo"):
    raise RequestError("echo is not supported", "echo")
  if body.get("suffix"):
    raise RequestError("suffix is not supported", "suffix")
  p = body.get("prompt")
  is_ids = lambda x: isinstance(x, list) and x and all(type(t) is int for t in x)
  if isinstance(p, str) or is_ids(p):
    prompts = [p]
  elif isinstance(p, list) and p and all(isinstance(x, str) or is_ids(x) for x in p):
    prompts = p
  else:
    raise RequestError(
      "prompt must be a string, a list of token ids, or a list of either", "prompt"
    )
  if any(x == "" for x in prompts):
    raise RequestError("prompt must not be empty", "prompt")
  prompts = tuple(x if isinstance(x, str) else tuple(x) for x in prompts)
  return CompletionRequest(
    model=_model(body),
    prompts=prompts,
    sampling=_sampling(body),
    logprobs=_int(body, "logprobs", None, 0, 5),
  )
