"""Capture for RL: calls under /episodes/<id>/v1 record the engine's exact tokens, log-probs and
policy versions; turns extend one segment token-exactly; a call whose prompt does not extend
the previous tokens starts a counted new segment (tests/test_gateway_grpo.py checks that an
openai-client harness speaking the agent's protocol yields the agent loop's trajectory)."""

import jax
import numpy as np
import openai
import pytest

from envs.gateway import BackgroundServer, Gateway, make_app
from envs.gateway.capture import Call, assemble
from models import config as mcfg
from models import transformer
from models.inference.engine import Engine
from models.inference.generator import GenerationRequest, Generator
from models.io.tokenizer import ByteTokenizer
from models.sampling import SamplingParams

TOK = ByteTokenizer()
SYSTEM = {"role": "system", "content": "You are terse."}


@pytest.fixture(scope="module")
def served():
  cfg = mcfg.tiny("qwen3", vocab_size=TOK.vocab_size, max_seq_len=512)
  params = transformer.init(cfg, jax.random.key(1))
  gen = Generator(Engine(cfg, params, max_concurrent_decodes=4, max_seq_len=512), tokenizer=TOK)
  gw = Gateway(gen, TOK, model_name="tiny", max_tokens=12)
  srv = BackgroundServer(make_app(gw))
  yield gw, srv
  srv.close()
  gen.close()


def test_turns_extend_one_segment_with_the_engines_tokens(served):
  gw, srv = served
  gw.open_episode("ep-a")
  client = openai.OpenAI(base_url=srv.base_url("ep-a"), api_key="none", max_retries=0)
  msgs = [SYSTEM, {"role": "user", "content": "hello"}]
  r1 = client.chat.completions.create(
    model="tiny", messages=msgs, seed=11, max_tokens=10, logprobs=True
  )
  msgs += [r1.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "more"}]
  r2 = client.chat.completions.create(model="tiny", messages=msgs, seed=12, max_tokens=10)
  cap = gw.close_episode("ep-a")
  c1, c2 = cap.calls
  assert c1.prompt_tokens == tuple(TOK.encode(TOK.apply_chat_template(msgs[:2])))
  head = c1.prompt_tokens + c1.completion_tokens
  assert c2.prompt_tokens[: len(head)] == head  # earlier turns are never re-tokenised
  assert r2.usage.prompt_tokens == len(c2.prompt_tokens)
  assert c1.logprobs == tuple(x.logprob for x in r1.choices[0].logprobs.content)
  # A fresh engine request for the recorded prompt samples the same tokens; its log-probs
  # agree to float32 rounding (the decode steps are chunked differently in that run).
  for call, seed in ((c1, 11), (c2, 12)):
    ref = gw.policy.submit(
      GenerationRequest(list(call.prompt_tokens), 10, SamplingParams(seed=seed),
                        stop_token_ids=gw.stop_ids)
    ).result(timeout=120)  # fmt: skip
    assert call.completion_tokens == tuple(ref.tokens)
    np.testing.assert_allclose(call.logprobs, ref.logprobs, rtol=0, atol=1e-5)
    assert set(call.versions) == {gw.policy.engine.policy_version}
  ep = cap.episode()
  (seg,) = ep.segments
  assert ep.elisions == 0 and len(ep.turns) == 2
  n1 = len(c1.prompt_tokens)
  assert seg.tokens == list(c2.prompt_tokens + c2.completion_tokens)
  assert seg.loss_mask == [0] * n1 + [1] * len(c1.completion_tokens) + [0] * (
    len(c2.prompt_tokens) - len(head)
  ) + [1] * len(c2.completion_tokens)
  assert [lp for lp, m in zip(seg.logprobs, seg.loss_mask, strict=True) if m] == list(
    c1.logprobs + c2.logprobs
  )
  # An edited history does not extend the tokens: a new, counted segment.
  gw.open_episode("ep-b")
  client = openai.OpenAI(base_url=srv.base_url("ep-b"), api_key="none", max_retries=0)
  client.chat.completions.create(model="tiny", messages=msgs[:2], seed=1, max_tokens=4)
  edited = [SYSTEM, {"role": "user", "content": "hello!"}]
  client.chat.completions.create(model="tiny", messages=edited, seed=2, max_tokens=4)
  ep = gw.close_episode("ep-b").episode()
  assert len(ep.segments) == 2 and ep.elisions == 1 and ep.generated_tokens == 8


def test_assemble_hand_case():
  call = lambda p, c: Call(
    tuple(p), tuple(c), tuple(0.5 for _ in c), tuple(3 for _ in c), "stop", ""
  )
  segs, breaks = assemble(
    [call([1, 2], [3]), call([1, 2, 3, 4], [5, 6]), call([1, 2], [7]), call([9], [8])]
  )
  assert breaks == 1  # [1, 2] again is a sibling of the first call (same prompt), [9] a break
  assert [s.tokens for s in segs] == [[1, 2, 3, 4, 5, 6], [1, 2, 7], [9, 8]]
  assert [s.loss_mask for s in segs] == [[0, 0, 1, 0, 1, 1], [0, 0, 1], [0, 1]]
  assert segs[0].versions == [-1, -1, 3, -1, 3, 3] and segs[0].logprobs[2] == 0.5
