"""Incremental text of a completion as its tokens arrive (for SSE streaming).

The generator calls `TokenStream.on_token` on its own thread; the token is handed to the event
loop's queue, where `delta` turns the tokens so far into the text that is safe to send: what
is decoded, less a trailing partial UTF-8 character and the last (longest stop string - 1)
characters, which could still become a stop string that the final text cuts. `rest` is the
final text's tail beyond what was sent, so the chunks always add up to the response's text.
"""

from __future__ import annotations

import asyncio


class TokenStream:
  """Tokens of one request -> text deltas; created on the event loop that reads them."""

  def __init__(self, tokenizer, stop_ids):
    self.tokenizer, self.stop_ids = tokenizer, tuple(stop_ids)
    self.loop = asyncio.get_running_loop()
    self.queue: asyncio.Queue = asyncio.Queue()
    self.started = asyncio.Event()  # set once the engine accepted the request
    self.active = False  # set by the gateway when it streams this request incrementally
    self.stops: tuple[str, ...] = ()
    self.tokens: list[int] = []
    self.sent = ""
    self.cut = False  # a stop string appeared: nothing more is sent before the end

  def attach(self, stops) -> None:
    """Called by the gateway for a request it streams; user stop strings cut the text."""
    self.active, self.stops = True, tuple(s for s in stops if s)

  def on_token(self, tok: int) -> None:  # generator thread
    self.loop.call_soon_threadsafe(self.queue.put_nowait, tok)

  def delta(self, tok: int) -> str:
    """The newly safe text after token `tok` ('' if none)."""
    if self.cut or tok in self.stop_ids:
      return ""
    self.tokens.append(tok)
    text = self.tokenizer.decode(self.tokens)
    hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
    if hits:
      text, self.cut = text[: min(hits)], True
    elif self.stops:
      text = text[: max(len(text) - max(map(len, self.stops)) + 1, 0)]
    text = text.rstrip("\ufffd")
    if len(text) <= len(self.sent) or not text.startswith(self.sent):
      return ""
    out, self.sent = text[len(self.sent) :], text
    return out

  def rest(self, final: str) -> str:
    """What of the final text has not been sent (it always starts with what was)."""
    return final[len(self.sent) :] if final.startswith(self.sent) else ""
