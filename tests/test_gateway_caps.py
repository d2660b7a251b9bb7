"""The gateway's caps over loopback HTTP with the real `openai` client and httpx: a request body
over the cap is refused with 413 (before it is tokenised), JSON nested too deep with 400 in the
OpenAI error shape, and with an API key every route wants `Authorization: Bearer <key>`."""

import httpx
import jax
import openai
import pytest

from envs.gateway import BackgroundServer, Gateway, make_app
from envs.gateway.server import json_depth
from models import config as mcfg
from models import transformer
from models.inference.engine import Engine
from models.inference.generator import Generator
from models.io.tokenizer import ByteTokenizer

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gateway():
  tok = ByteTokenizer()
  cfg = mcfg.tiny("qwen3", vocab_size=tok.vocab_size, max_seq_len=128)
  params = transformer.init(cfg, jax.random.key(0))
  gen = Generator(Engine(cfg, params, max_concurrent_decodes=2, max_seq_len=128), tokenizer=tok)
  yield Gateway(gen, tok, model_name="tiny", max_tokens=4)
  gen.close()


def test_body_cap_and_json_depth(gateway):
  with BackgroundServer(make_app(gateway, max_body_bytes=4096)) as srv:
    client = openai.OpenAI(base_url=srv.base_url(), api_key="none", max_retries=0)
    assert client.chat.completions.create(model="tiny", messages=USER, max_tokens=2).choices
    big = [{"role": "user", "content": "x" * 8192}]
    with pytest.raises(openai.APIStatusError) as e:
      client.chat.completions.create(model="tiny", messages=big, max_tokens=2)
    assert e.value.status_code == 413 and e.value.body["code"] == "request_too_large"
    # A body streamed without Content-Length is cut off at the cap too.
    chunks = (b"x" * 1024 for _ in range(16))
    r = httpx.post(srv.base_url() + "/chat/completions", content=chunks)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    deep = b'{"model": "tiny", "messages": ' + b"[" * 1500 + b"]" * 1500 + b"}"
    r = httpx.post(srv.base_url() + "/chat/completions", content=deep)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and "deeper than 32" in err["message"]


def test_api_key(gateway):
  with BackgroundServer(make_app(gateway, api_key="s3cret")) as srv:
    ok = openai.OpenAI(base_url=srv.base_url(), api_key="s3cret", max_retries=0)
    assert [m.id for m in ok.models.list()] == ["tiny"]
    assert ok.chat.completions.create(model="tiny", messages=USER, max_tokens=2).choices
    bad = openai.OpenAI(base_url=srv.base_url(), api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
      bad.chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    assert e.value.body["code"] == "invalid_api_key"
    r = httpx.get(srv.url + "/stats")  # no header at all
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_json_depth_skips_brackets_inside_strings():
  assert json_depth(b'{"a": "[[[[{{{{", "b": [1, [2]]}', 10) == 3
  assert json_depth(b'{"a": "\\"[[["}', 10) == 1
  assert json_depth(b"[" * 100, 5) == 6  # stops counting past the limit
