"""The HTTP layer: FastAPI routes over a Gateway, SSE streaming, and a background uvicorn server.

Routes: `/v1/models`, `/v1/chat/completions`, `/v1/completions`, the same three under
`/episodes/<id>/v1` (recorded for RL; an unmodified client only needs that base URL), and
`/stats`. Every error is an OpenAI error object naming the wrong field.

Streaming sends the finished completion as `chat.completion.chunk` / `text_completion`
chunks at token boundaries (the engine's API returns a whole completion, so the first chunk
arrives when generation ends).
"""

from __future__ import annotations

import json
import threading

import fastapi
import uvicorn
from fastapi.responses import JSONResponse, StreamingResponse

from envs.gateway.protocol import RequestError
from envs.gateway.service import Gateway


def _chunks(resp: dict, pieces, include_usage: bool):
  """SSE lines of a finished response (chat or text completion)."""
  is_chat = resp["object"] == "chat.completion"
  head = {k: resp[k] for k in ("id", "created", "model")}
  head["object"] = "chat.completion.chunk" if is_chat else "text_completion"
  sse = lambda obj: f"data: {json.dumps(obj)}\n\n"

  def chunk(index, delta, finish=None, logprobs=None):
    c = {"index": index, "logprobs": logprobs, "finish_reason": finish}
    c.update({"delta": delta} if is_chat else {"text": delta})
    return sse({**head, "choices": [c]})

  for ch, parts in zip(resp["choices"], pieces, strict=True):
    i = ch["index"]
    if is_chat:
      yield chunk(i, {"role": "assistant", "content": ""})
    for p in parts:
      yield chunk(i, {"content": p} if is_chat else p)
    calls = ch["message"].get("tool_calls") if is_chat else None
    if calls:
      yield chunk(i, {"tool_calls": [dict(c, index=j) for j, c in enumerate(calls)]})
    yield chunk(i, {} if is_chat else "", ch["finish_reason"], ch.get("logprobs"))
  if include_usage:
    yield sse({**head, "choices": [], "usage": resp["usage"]})
  yield "data: [DONE]\n\n"


def make_app(gateway: Gateway) -> fastapi.FastAPI:
  app = fastapi.FastAPI(title="agentrl gateway")

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
    raw = await request.body()
    try:
      return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise RequestError(f"the request body is not valid JSON: {e}") from None

  async def respond(fn, request, episode_id):
    body = await body_of(request)
    resp = await fn(body, episode_id)
    pieces = resp.pop("_pieces")
    if isinstance(body, dict) and body.get("stream"):
      usage = bool((body.get("stream_options") or {}).get("include_usage"))
      return StreamingResponse(_chunks(resp, pieces, usage), media_type="text/event-stream")
    return JSONResponse(resp)

  for prefix in ("/v1", "/episodes/{episode_id}/v1"):

    @app.get(prefix + "/models")
    async def models(episode_id: str | None = None):
      gateway.capture(episode_id)
      return gateway.models()

    @app.post(prefix + "/chat/completions")
    async def chat(request: fastapi.Request, episode_id: str | None = None):
      return await respond(gateway.chat, request, episode_id)

    @app.post(prefix + "/completions")
    async def completions(request: fastapi.Request, episode_id: str | None = None):
      return await respond(gateway.completions, request, episode_id)

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
