"""The HTTP layer: FastAPI routes over a Gateway, SSE streaming, and a background uvicorn server.

Routes: `/v1/models`, `/v1/chat/completions`, `/v1/completions`, the same three under
`/episodes/<id>/v1` (recorded for RL; an unmodified client only needs that base URL), and
`/stats`. Every error is an OpenAI error object naming the wrong field.

Caps (`make_app(gateway, max_body_bytes=..., max_json_depth=..., api_key=...)`): a request body
over `max_body_bytes` is refused with 413 before it is read further (or tokenised); JSON nested
deeper than `max_json_depth` with 400; with `api_key` every route wants
`Authorization: Bearer <api_key>` (401 otherwise), for a server bound beyond loopback.

Streaming (`stream: true`) of one choice without tools sends `chat.completion.chunk` /
`text_completion` chunks as the tokens are produced (envs.gateway.streaming; the generator's
per-token callback). Tool calls, n > 1 and several prompts are parsed or batched on the whole
completion, so they stream the finished completion at token boundaries instead.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import threading
import time
import uuid

import fastapi
import uvicorn
from fastapi.responses import JSONResponse, StreamingResponse

from envs.gateway.protocol import RequestError
from envs.gateway.service import Gateway
from envs.gateway.streaming import TokenStream

_DONE = "data: [DONE]\n\n"
MAX_BODY_BYTES = 4 << 20  # 4 MiB: a 128k-token context as JSON text, with room to spare
MAX_JSON_DEPTH = 32  # chat messages with tool calls nest about 6 deep
# A JSON string (skipped whole, so brackets inside it do not count) or one bracket.
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def json_depth(raw: bytes, limit: int) -> int:
  """The nesting depth of JSON text `raw`, counted until it passes `limit` (no recursion, so
  a hostile body cannot exhaust the parser's stack)."""
  depth = top = 0
  for m in _JSON_TOKEN.finditer(raw):
    c = m.group()
    if c in (b"[", b"{"):
      depth += 1
      top = max(top, depth)
      if top > limit:
        break
    elif c in (b"]", b"}"):
      depth -= 1
  return top


async def read_body(request, limit: int) -> bytes:
  """The request body, refused (413) as soon as it passes `limit` bytes."""
  too_big = RequestError(
    f"the request body is larger than {limit} bytes", status=413, code="request_too_large"
  )
  declared = request.headers.get("content-length", "")
  if declared.isdigit() and int(declared) > limit:
    raise too_big
  chunks, size = [], 0
  async for chunk in request.stream():
    size += len(chunk)
    if size > limit:
      raise too_big
    chunks.append(chunk)
  return b"".join(chunks)


def _sse(obj) -> str:
  return f"data: {json.dumps(obj)}\n\n"


def _chunk(head: dict, index: int, delta, finish=None, logprobs=None) -> str:
  c = {"index": index, "logprobs": logprobs, "finish_reason": finish}
  c.update({"delta": delta} if head["object"] == "chat.completion.chunk" else {"text": delta})
  return _sse({**head, "choices": [c]})


def _tail(head: dict, ch: dict):
  """A choice's tool calls (chat) and its finish chunk."""
  is_chat = head["object"] == "chat.completion.chunk"
  calls = ch["message"].get("tool_calls") if is_chat else None
  if calls:
    yield _chunk(head, ch["index"], {"tool_calls": [dict(c, index=j) for j, c in enumerate(calls)]})
  yield _chunk(head, ch["index"], {} if is_chat else "", ch["finish_reason"], ch.get("logprobs"))


def _chunks(resp: dict, pieces, include_usage: bool):
  """SSE lines of a finished response (chat or text completion)."""
  is_chat = resp["object"] == "chat.completion"
  head = {k: resp[k] for k in ("id", "created", "model")}
  head["object"] = "chat.completion.chunk" if is_chat else "text_completion"
  for ch, parts in zip(resp["choices"], pieces, strict=True):
    i = ch["index"]
    if is_chat:
      yield _chunk(head, i, {"role": "assistant", "content": ""})
    for p in parts:
      yield _chunk(head, i, {"content": p} if is_chat else p)
    yield from _tail(head, ch)
  if include_usage:
    yield _sse({**head, "choices": [], "usage": resp["usage"]})
  yield _DONE


async def _live_chunks(task, stream: TokenStream, head: dict, include_usage: bool):
  """SSE lines of one choice as its tokens arrive, then the finished response's tail."""
  is_chat = head["object"] == "chat.completion.chunk"
  piece = lambda t: _chunk(head, 0, {"content": t} if is_chat else t)
  if is_chat:
    yield _chunk(head, 0, {"role": "assistant", "content": ""})
  while True:
    getter = asyncio.ensure_future(stream.queue.get())
    try:
      await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # the response is done (its last tokens are queued) or the client went away
      got = getter.done()
      if not got:
        getter.cancel()
    if not got:
      break
    if d := stream.delta(getter.result()):
      yield piece(d)
  while not stream.queue.empty():
    if d := stream.delta(stream.queue.get_nowait()):
      yield piece(d)
  try:
    resp = task.result()
  except RequestError as e:  # the status line is sent: the error goes in the stream
    yield _sse(e.body())
    return
  ch = resp["choices"][0]
  if rest := stream.rest((ch["message"]["content"] or "") if is_chat else ch["text"]):
    yield piece(rest)
  for line in _tail(head, ch):
    yield line
  if include_usage:
    yield _sse({**head, "choices": [], "usage": resp["usage"]})
  yield _DONE


def make_app(gateway: Gateway, *, max_body_bytes: int = MAX_BODY_BYTES,
             max_json_depth: int = MAX_JSON_DEPTH, api_key: str = "") -> fastapi.FastAPI:  # fmt: skip
  """The routes above over `gateway`, with the caps of the module docstring."""
  app = fastapi.FastAPI(title="agentrl gateway")

  if api_key:
    want = f"Bearer {api_key}".encode()

    @app.middleware("http")
    async def _bearer(request: fastapi.Request, call_next):
      got = request.headers.get("authorization", "").encode()
      if not hmac.compare_digest(got, want):
        err = RequestError("missing or wrong API key (Authorization: Bearer <key>)",
                           status=401, code="invalid_api_key")  # fmt: skip
        return JSONResponse(err.body(), status_code=401)
      return await call_next(request)

  @app.exception_handler(RequestError)
  async def _request_error(request, e: RequestError):
    return JSONResponse(e.body(), status_code=e.status)

  @app.exception_handler(fastapi.exceptions.RequestValidationError)
  async def _validation_error(request, e):
    return JSONResponse(RequestError(f"invalid request: {e.errors()[:1]}").body(), status_code=400)

  @app.exception_handler(404)
  async def _not_found(request, e):
    err = RequestError(f"no route {request.url.path}", None, status=404, code="not_found")
    return JSONResponse(err.body(), status_code=404)

  async def body_of(request: fastapi.Request):
    raw = await read_body(request, max_body_bytes)
    if json_depth(raw, max_json_depth) > max_json_depth:
      raise RequestError(f"the request body nests JSON deeper than {max_json_depth} levels")
    try:
      return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
      raise RequestError(f"the request body is not valid JSON: {e}") from None

  async def respond(fn, request, episode_id, kind: str):
    body = await body_of(request)
    if not (isinstance(body, dict) and body.get("stream")):
      resp = await fn(body, episode_id)
      resp.pop("_pieces")
      return JSONResponse(resp)
    usage = bool((body.get("stream_options") or {}).get("include_usage"))
    stream = TokenStream(gateway.tokenizer, gateway.stop_ids)
    task = asyncio.ensure_future(fn(body, episode_id, stream=stream))
    started = asyncio.ensure_future(stream.started.wait())
    await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
    started.cancel()
    if not stream.active or (task.done() and task.exception() is not None):
      resp = await task  # a bad request raises here, before any byte of the stream is sent
      pieces = resp.pop("_pieces")
      return StreamingResponse(_chunks(resp, pieces, usage), media_type="text/event-stream")
    head = {"id": f"{kind}-{uuid.uuid4().hex}", "created": int(time.time()),
            "model": gateway.model_name,
            "object": "chat.completion.chunk" if kind == "chatcmpl" else "text_completion"}  # fmt: skip
    return StreamingResponse(
      _live_chunks(task, stream, head, usage), media_type="text/event-stream"
    )

  for prefix in ("/v1", "/episodes/{episode_id}/v1"):

    @app.get(prefix + "/models")
    async def models(episode_id: str | None = None):
      gateway.capture(episode_id)
      return gateway.models()

    @app.post(prefix + "/chat/completions")
    async def chat(request: fastapi.Request, episode_id: str | None = None):
      return await respond(gateway.chat, request, episode_id, "chatcmpl")

    @app.post(prefix + "/completions")
    async def completions(request: fastapi.Request, episode_id: str | None = None):
      return await respond(gateway.completions, request, episode_id, "cmpl")

  @app.get("/stats")
  async def stats():
    return gateway.stats()

  return app


class BackgroundServer:
  """uvicorn serving `app` on host:port (0: an ephemeral port) in a daemon thread."""

  def __init__(self, app, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 60.0):
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    self.server = uvicorn.Server(config)
    self.thread = threading.Thread(target=self.server.run, name="gateway-http", daemon=True)
    self.thread.start()
    deadline = threading.Event()
    for _ in range(int(timeout_s * 20)):
      if self.server.started or not self.thread.is_alive():
        break
      deadline.wait(0.05)
    if not self.server.started:
      raise RuntimeError(f"gateway server did not start on {host}:{port} within {timeout_s}s")
    sock = self.server.servers[0].sockets[0]
    self.host, self.port = sock.getsockname()[:2]
    self.url = f"http://{self.host}:{self.port}"

  def base_url(self, episode_id: str | None = None) -> str:
    return f"{self.url}/episodes/{episode_id}/v1" if episode_id else f"{self.url}/v1"

  def close(self) -> None:
    self.server.should_exit = True
    self.thread.join(timeout=30)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
