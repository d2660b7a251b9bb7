"""The OpenAI-compatible gateway through the real `openai` client over loopback HTTP (uvicorn on
127.0.0.1, an ephemeral port): chat, n > 1, seeds, logprobs, streaming, tools, completions,
OpenAI-shaped errors, and continuous batching of concurrent clients (engine counters)."""

import json
import threading

import httpx
import jax
import openai
import pytest

from envs import procedural
from envs.agents import agent
from envs.gateway import BackgroundServer, Gateway, make_app
from models import config as mcfg
from models import transformer
from models.inference.engine import Engine
from models.inference.generator import GenerationRequest, Generator
from models.io.tokenizer import train_bpe
from models.sampling import SamplingParams

USER = [{"role": "user", "content": "Create a file named a.txt"}]


def _tokenizer():
  tasks = [procedural.generate("echo_word", s) for s in range(100)]
  return train_bpe([t.instruction for t in tasks] + [t.solution_script for t in tasks], 300)


@pytest.fixture(scope="module")
def served():
  tok = _tokenizer()
  cfg = mcfg.tiny("qwen3", vocab_size=tok.vocab_size, max_seq_len=256)
  params = transformer.init(cfg, jax.random.key(0))
  gen = Generator(Engine(cfg, params, max_concurrent_decodes=8, max_seq_len=256), tokenizer=tok)
  gw = Gateway(gen, tok, model_name="tiny", max_tokens=16)
  srv = BackgroundServer(make_app(gw))
  yield gw, srv, openai.OpenAI(base_url=srv.base_url(), api_key="none", max_retries=0)
  srv.close()
  gen.close()


def test_models_chat_n_and_seed(served):
  gw, srv, client = served
  assert [m.id for m in client.models.list()] == ["tiny"]
  a = client.chat.completions.create(model="tiny", messages=USER, max_tokens=6, n=3, seed=7)
  b = client.chat.completions.create(model="tiny", messages=USER, max_tokens=6, n=3, seed=7)
  assert [c.index for c in a.choices] == [0, 1, 2]
  assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
  assert len({c.message.content for c in a.choices}) > 1  # each choice has its own seed
  assert a.usage.completion_tokens == sum(1 for _ in range(3)) * 6
  prompt = gw.tokenizer.encode(gw.tokenizer.apply_chat_template(USER))
  assert a.usage.prompt_tokens == len(prompt)


def test_greedy_logprobs_match_the_engine(served):
  """The chosen token is the top alternative and its log-prob is the engine's; tokens and
  log-probs equal a direct engine request for the same prompt."""
  gw, srv, client = served
  r = client.chat.completions.create(
    model="tiny", messages=USER, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3
  )
  rows = r.choices[0].logprobs.content
  assert len(rows) == 5
  for row in rows:
    assert row.top_logprobs[0].token == row.token
    assert abs(row.top_logprobs[0].logprob - row.logprob) < 2e-4
    assert row.top_logprobs[0].logprob >= row.top_logprobs[1].logprob >= row.top_logprobs[2].logprob
  prompt = gw.tokenizer.encode(gw.tokenizer.apply_chat_template(USER))
  ref = gw.policy.submit(
    GenerationRequest(prompt, 5, SamplingParams(greedy=True), stop_token_ids=gw.stop_ids)
  ).result(timeout=120)
  assert [x.logprob for x in rows] == ref.logprobs
  assert "".join(x.token for x in rows) == gw.tokenizer.decode(ref.tokens)


def test_streaming_equals_the_whole_response(served):
  gw, srv, client = served
  kw = dict(model="tiny", messages=USER, max_tokens=8, seed=3)
  whole = client.chat.completions.create(**kw)
  chunks = list(
    client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
  )
  text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
  assert text == whole.choices[0].message.content
  assert chunks[0].choices[0].delta.role == "assistant"
  assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[
    0
  ].finish_reason
  assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
  texts = client.completions.create(model="tiny", prompt="hello", max_tokens=6, seed=2, stream=True)
  plain = client.completions.create(model="tiny", prompt="hello", max_tokens=6, seed=2)
  assert "".join(c.choices[0].text for c in texts) == plain.choices[0].text


def test_completions_with_token_ids_and_logprobs(served):
  gw, srv, client = served
  ids = gw.tokenizer.encode("hello world")
  r = client.completions.create(model="tiny", prompt=ids, max_tokens=4, temperature=0, logprobs=2)
  lp = r.choices[0].logprobs
  assert len(lp.tokens) == 4 and all(len(t) == 2 for t in lp.top_logprobs)
  assert lp.text_offset[0] == 0 and r.usage.prompt_tokens == len(ids)
  two = client.completions.create(model="tiny", prompt=["a b", "c d"], max_tokens=3, n=2, seed=1)
  assert [c.index for c in two.choices] == [0, 1, 2, 3]


def test_bad_requests_are_openai_errors_naming_the_field(served):
  gw, srv, client = served
  cases = [
    (dict(messages=USER, temperature=5), "temperature"),
    (dict(messages=USER, top_p=0), "top_p"),
    (dict(messages=USER, n=0), "n"),
    (dict(messages=[{"role": "robot", "content": "x"}]), "messages[0].role"),
    (dict(messages=USER, top_logprobs=2), "top_logprobs"),
    (dict(messages=USER, max_tokens=10_000), "max_tokens"),
    (dict(messages=USER, stop=[""]), "stop"),
    (dict(messages=USER, presence_penalty=1.0), "presence_penalty"),
    (dict(messages=[]), "messages"),
  ]
  for kw, param in cases:
    with pytest.raises(openai.BadRequestError) as e:
      client.chat.completions.create(model="tiny", **kw)
    assert e.value.body["param"] == param and e.value.body["type"] == "invalid_request_error"
  with pytest.raises(openai.NotFoundError) as e:
    client.chat.completions.create(model="gpt-9", messages=USER)
  assert e.value.body["param"] == "model"
  r = httpx.post(srv.url + "/v1/chat/completions", content=b"{not json", timeout=30)
  assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
  ghost = openai.OpenAI(base_url=srv.base_url("ghost"), api_key="none", max_retries=0)
  with pytest.raises(openai.NotFoundError) as e:
    ghost.chat.completions.create(model="tiny", messages=USER)
  assert e.value.body["code"] == "episode_not_found"


def test_concurrent_clients_share_decode_steps(served):
  """8 clients at once: the engine generates more tokens than it runs steps + prefills, which
  one request at a time cannot (one token per step, plus the prefill's first token)."""
  gw, srv, client = served
  before = gw.stats()
  start, outs = threading.Barrier(8), []

  def one(i):
    c = openai.OpenAI(base_url=srv.base_url(), api_key="none", max_retries=0)
    start.wait(timeout=60)
    outs.append(c.completions.create(model="tiny", prompt=f"p{i}", max_tokens=48, seed=i,
                                     extra_body={"ignore_eos": True}))  # fmt: skip

  threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=300)
  assert len(outs) == 8 and all(o.usage.completion_tokens == 48 for o in outs)
  after = gw.stats()
  d = {k: after[k] - before[k] for k in ("tokens_generated", "decode_steps", "prefills")}
  assert d["tokens_generated"] == 8 * 48
  assert d["tokens_generated"] > d["decode_steps"] + d["prefills"]


def test_tools_are_described_and_calls_parsed():
  tok = _tokenizer()
  call = '<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>'
  bad = '<tool_call>{"name": "rm"}</tool_call>'
  policy = agent.ScriptedPolicy(tok, ["let me look" + call, bad, call])
  gw = Gateway(policy, tok, model_name="m")
  tools = [{"type": "function", "function": {"name": "bash", "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]  # fmt: skip
  with BackgroundServer(make_app(gw)) as srv:
    client = openai.OpenAI(base_url=srv.base_url(), api_key="none", max_retries=0)
    r = client.chat.completions.create(model="m", messages=USER, tools=tools)
    (c,) = r.choices
    assert c.finish_reason == "tool_calls" and c.message.content == "let me look"
    assert c.message.tool_calls[0].function.name == "bash"
    assert json.loads(c.message.tool_calls[0].function.arguments) == {"command": "ls -la"}
    assert "Run a command" in tok.decode(policy.prompts[0])  # the tools reach the model
    r2 = client.chat.completions.create(model="m", messages=USER, tools=tools)  # unknown tool
    assert r2.choices[0].message.tool_calls is None and r2.choices[0].finish_reason == "stop"
    streamed = list(
      client.chat.completions.create(model="m", messages=USER, tools=tools, stream=True)
    )
    (calls,) = [c.choices[0].delta.tool_calls for c in streamed if c.choices[0].delta.tool_calls]
    assert calls[0].function.name == "bash" and calls[0].index == 0
    assert streamed[-1].choices[0].finish_reason == "tool_calls"
