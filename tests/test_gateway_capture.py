"""Capture for RL: calls under /episodes/<id>/v1 record the engine's exact tokens, log-probs and
policy versions; turns extend one segment token-exactly; a call whose prompt does not extend
the previous tokens starts a counted new segment; an openai-client harness speaking the agent's
protocol yields the same trajectory as our agent loop."""

import jax
import numpy as np
import openai
import pytest

from envs import agent
from envs import sandbox as sandbox_lib
from envs.gateway import BackgroundServer, Gateway, make_app
from envs.gateway.capture import Call, assemble
from envs.sandbox.base import SandboxSpec
from models import config as mcfg
from models import transformer
from models.engine import Engine
from models.generator import GenerationRequest, Generator
from models.sampling import SamplingParams
from models.tokenizer import ByteTokenizer

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


def _agent_protocol_harness(base_url, box, instruction, cfg):
  """A plain openai-client agent that speaks envs.agent's protocol (system prompt, tool-call
  text, observations as tool messages): the gateway must record the agent's exact tokens."""
  client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
  msgs = [{"role": "system", "content": agent.DEFAULT_SYSTEM_PROMPT},
          {"role": "user", "content": instruction}]  # fmt: skip
  for _ in range(cfg.max_turns):
    r = client.chat.completions.create(
      model="m", messages=msgs, max_tokens=cfg.max_new_tokens, stop=[agent.TOOL_CALL_CLOSE]
    )
    text = r.choices[0].message.content
    msgs.append({"role": "assistant", "content": text})
    try:
      call = agent.parse_tool_call(text + agent.TOOL_CALL_CLOSE)
    except agent.ToolCallError as e:
      msgs.append({"role": "tool", "content": f"error: {e}"})
      continue
    if call.name == "finish":
      return
    res = box.exec(call.arguments["command"], timeout_s=cfg.exec_timeout_s)
    obs = agent.format_exec_observation(res.exit_code, res.stdout, res.stderr, res.timed_out)
    msgs.append({"role": "tool", "content": agent.truncate_middle(obs, cfg.max_obs_chars)})


def test_openai_client_harness_matches_the_agent_loop_token_for_token():
  actions = [
    agent.format_tool_call("shell", command="echo hi > a.txt && cat a.txt"),
    "no call here",
    agent.format_tool_call("finish"),
  ]
  cfg = agent.AgentConfig(max_turns=5, max_new_tokens=200)
  fmt = agent.ChatFormat(TOK)
  spec = SandboxSpec(exec_timeout_s=20, episode_timeout_s=120)
  with sandbox_lib.make("bwrap", spec) as box:
    ours = agent.run_episode(
      agent.ScriptedPolicy(TOK, actions), fmt, box, "do it", cfg, episode_id="x"
    )
  gw = Gateway(agent.ScriptedPolicy(TOK, actions), TOK, model_name="m")
  with BackgroundServer(make_app(gw)) as srv, sandbox_lib.make("bwrap", spec) as box:
    gw.open_episode("y")
    _agent_protocol_harness(srv.base_url("y"), box, "do it", cfg)
    theirs = gw.close_episode("y").episode()
  assert ours.finish_reason == "finish" and len(theirs.turns) == len(ours.turns) == 3
  assert len(ours.segments) == len(theirs.segments) == 1 and theirs.elisions == 0
  for f in ("tokens", "loss_mask", "logprobs", "versions"):
    assert getattr(theirs.segments[0], f) == getattr(ours.segments[0], f), f
