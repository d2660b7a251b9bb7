"""Incremental streaming through the real `openai` client over loopback HTTP: chunks reach the
client while the engine is still generating the completion (checked by event order: the
engine's token callback holds the last token until the client has read a content chunk, so a gateway that sent
the text only at the end would never get there), and the chunks add up to the whole response."""

import asyncio
import dataclasses
import threading

import jax
import openai
import pytest

from envs import procedural
from envs.gateway import BackgroundServer, Gateway, make_app
from envs.gateway.streaming import TokenStream
from models import config as mcfg
from models import transformer
from models.inference.engine import Engine
from models.inference.generator import Generator
from models.io.tokenizer import train_bpe

USER = [{"role": "user", "content": "Create a file named a.txt"}]
DEADLINE_S = 120


class GatedPolicy:
  """The real Generator; a streamed request's last token is held back until the client has
  read a content chunk (so the completion cannot end first), and the order of events is
  logged."""

  def __init__(self, gen):
    self.gen, self.engine, self.events = gen, gen.engine, []
    self.client_read = threading.Event()

  def submit(self, req):
    seen = [0]
    inner = req.on_token

    def on_token(tok):
      seen[0] += 1
      if seen[0] == req.max_new_tokens:
        self.events.append("engine waits")
        if not self.client_read.wait(DEADLINE_S):
          self.events.append("engine gave up waiting")
      inner(tok)

    if inner is not None:
      req = dataclasses.replace(req, on_token=on_token)
    fut = self.gen.submit(req)
    fut.add_done_callback(lambda _: self.events.append("completion done"))
    return fut

  def stats(self):
    return self.gen.stats()

  def release_session(self, session_id):
    self.gen.release_session(session_id)


@pytest.fixture(scope="module")
def served():
  tasks = [procedural.generate("echo_word", s) for s in range(100)]
  tok = train_bpe([t.instruction for t in tasks] + [t.solution_script for t in tasks], 300)
  cfg = mcfg.tiny("qwen3", vocab_size=tok.vocab_size, max_seq_len=256)
  params = transformer.init(cfg, jax.random.key(0))
  gen = Generator(Engine(cfg, params, max_concurrent_decodes=4, max_seq_len=256), tokenizer=tok)
  policy = GatedPolicy(gen)
  gw = Gateway(policy, tok, model_name="tiny", max_tokens=16)
  srv = BackgroundServer(make_app(gw))
  yield policy, openai.OpenAI(base_url=srv.base_url(), api_key="none", max_retries=0)
  srv.close()
  gen.close()


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_chunks_arrive_before_the_completion_ends(served, kind):
  policy, client = served
  policy.events.clear()
  policy.client_read.clear()
  kw = dict(model="tiny", max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
  # The events are cleared once the non-streamed request has finished (its done callback runs
  # before its response is sent) and before the streamed one starts: the engine may reach the
  # streamed request's last token before `create` returns, and that event must not be lost.
  if kind == "chat":
    whole = client.chat.completions.create(messages=USER, **kw).choices[0].message.content
    policy.events.clear()
    stream = client.chat.completions.create(messages=USER, stream=True, **kw)
    text = lambda c: c.choices[0].delta.content if c.choices else None
  else:
    whole = client.completions.create(prompt="Create a file", **kw).choices[0].text
    policy.events.clear()
    stream = client.completions.create(prompt="Create a file", stream=True, **kw)
    text = lambda c: c.choices[0].text if c.choices else None
  parts, finish = [], None
  for chunk in stream:
    if text(chunk):
      if not policy.client_read.is_set():
        policy.events.append("client read")
        policy.client_read.set()
      parts.append(text(chunk))
    if chunk.choices and chunk.choices[0].finish_reason:
      finish = chunk.choices[0].finish_reason
  ev = policy.events
  assert sorted(ev) == ["client read", "completion done", "engine waits"], ev
  assert ev.index("client read") < ev.index("completion done"), ev
  assert "".join(parts) == whole and len(parts) > 1 and finish == "length"


class _Chars:
  """A character-level tokenizer (token id = code point), enough for TokenStream."""

  def decode(self, ids):
    return "".join(map(chr, ids))


async def _deltas(text, stops, stop_ids=()):
  s = TokenStream(_Chars(), stop_ids)
  s.attach(stops)
  return [s.delta(ord(c)) for c in text], s


@pytest.mark.parametrize(
  "text,stops,final",
  [("hello world", [], "hello world"), ("say STOP now", ["STOP"], "say "),
   ("abcSTab", ["STOP"], "abcSTab")],
)  # fmt: skip
def test_token_stream_holds_back_what_a_stop_string_may_cut(text, stops, final):
  deltas, s = asyncio.run(_deltas(text, stops))
  sent = "".join(deltas)
  assert final.startswith(sent) and sent + s.rest(final) == final
  for i in range(len(text)):  # never ahead of a text that a stop string could still cut
    assert len("".join(deltas[: i + 1])) <= max(i + 1 - (max(map(len, stops), default=1) - 1), 0)
