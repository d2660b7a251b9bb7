"""The agent loop in real bubblewrap sandboxes: token bookkeeping, malformed calls, budgets,
context elision, rollback, sandbox death, and engine/trainer logprob agreement."""

import threading
import time

import jax
import numpy as np
import pytest

from envs import sandbox as sandbox_lib
from envs.agents import agent, tool_format
from envs.sandbox import testing as sandbox_testing
from envs.sandbox.base import SandboxSpec
from models.io.tokenizer import ByteTokenizer

TOK = ByteTokenizer()
CALL = tool_format.format_tool_call


@pytest.fixture
def box():
  sb = sandbox_lib.make("bwrap", SandboxSpec(exec_timeout_s=20, episode_timeout_s=120))
  yield sb
  sb.close()


def _run(box, actions, cfg=agent.AgentConfig(max_turns=6), system="", instruction="do it"):
  policy = agent.ScriptedPolicy(TOK, actions)
  fmt = tool_format.ChatFormat(TOK, system_prompt=system)
  return agent.run_episode(policy, fmt, box, instruction, cfg, episode_id="e1"), policy


def test_episode_tokens_masks_and_prefix_growth(box):
  acts = [
    CALL("shell", command="echo hello > a.txt && cat a.txt"),
    CALL("write_file", path="b.txt", content="bee"),
    CALL("finish"),
  ]
  ep, policy = _run(box, acts)
  assert ep.finish_reason == "finish" and ep.infra_error is None
  assert box.read_file("a.txt") == b"hello\n" and box.read_file("b.txt") == b"bee"
  (seg,) = ep.segments
  # Each turn's prompt extends the previous prompt token-exactly (session prefix reuse works).
  for a, b in zip(policy.prompts, policy.prompts[1:], strict=False):
    assert b[: len(a)] == a and len(b) > len(a)
  assert seg.tokens[: len(policy.prompts[-1])] == policy.prompts[-1]
  # Exactly the generated tokens carry the loss mask, in order.
  gen = [t for t, m in zip(seg.tokens, seg.loss_mask, strict=True) if m]
  assert gen == [t for a in acts for t in TOK.encode(a)]
  assert "stdout:\nhello" in TOK.decode(seg.tokens) and seg.loss_mask[-1] == 1  # trimmed tail
  assert [t.tool for t in ep.turns] == ["shell", "write_file", "finish"]
  assert [t.command for t in ep.turns[:2]] == [
    "echo hello > a.txt && cat a.txt",
    "write_file b.txt",
  ]


def test_malformed_calls_become_error_observations(box):
  acts = [
    "ls",
    '<tool_call>{"name": "shell", "arguments": {"cmd": "ls"}}</tool_call>',
    '<tool_call>{"name": "nuke", "arguments": {}}</tool_call>',
    "<tool_call>{oops</tool_call>",
    CALL("shell", command="echo ok"),
    CALL("finish"),
  ]
  ep, _ = _run(box, acts, agent.AgentConfig(max_turns=8))
  assert ep.finish_reason == "finish" and ep.infra_error is None
  assert [t.error is not None for t in ep.turns] == [True] * 4 + [False] * 2
  text = TOK.decode(ep.segments[0].tokens)
  for needle in (
    "no tool call found",
    "missing arguments ['command']",
    "unknown tool 'nuke'",
    "not valid JSON",
  ):
    assert needle in text


def test_turn_and_token_budgets(box):
  ep, _ = _run(box, [CALL("shell", command="true")], agent.AgentConfig(max_turns=3))
  assert ep.finish_reason == "max_turns" and len(ep.turns) == 3
  cfg = agent.AgentConfig(max_turns=10, max_episode_tokens=100)
  ep, _ = _run(box, [CALL("shell", command="true")], cfg)
  assert ep.finish_reason == "token_budget" and ep.generated_tokens <= 100


def test_long_observation_is_truncated_with_marker(box):
  cfg = agent.AgentConfig(max_turns=2, max_obs_chars=200)
  ep, _ = _run(box, [CALL("shell", command="seq 1 5000"), CALL("finish")], cfg)
  text = TOK.decode(ep.segments[0].tokens)
  assert "chars truncated ...]" in text and "\n4999\n5000" in text and "\n2500\n" not in text


def test_context_elision_starts_a_new_segment(box):
  cfg = agent.AgentConfig(
    max_turns=6, max_context_tokens=700, max_new_tokens=96, keep_recent_turns=1, max_obs_chars=150
  )
  acts = [CALL("shell", command=f"seq {i} 400") for i in range(5)] + [CALL("finish")]
  ep, policy = _run(box, acts, cfg, instruction="count things")
  assert ep.elisions >= 1 and len(ep.segments) == ep.elisions + 1
  last = ep.segments[-1]
  assert len(last.tokens) <= 700 and TOK.decode(last.tokens).count(tool_format.ELIDED) >= 1
  assert "count things" in TOK.decode(last.tokens)  # the instruction is kept
  # Every generated token is trained exactly once, in the segment that produced it.
  gen = [t for s in ep.segments for t, m in zip(s.tokens, s.loss_mask, strict=True) if m]
  assert gen == [t for a in acts[: len(ep.turns)] for t in TOK.encode(a)]
  # Within a segment the context still grows token-exactly.
  assert all(len(p) <= 700 for p in policy.prompts)


def test_rollback_of_an_action_that_destroys_the_workspace(box):
  cfg = agent.AgentConfig(max_turns=3, snapshot_every_turn=True)
  acts = [
    CALL("write_file", path="keep.txt", content="precious"),
    CALL("shell", command="rm -rf ./* ./.[!.]*"),
    CALL("finish"),
  ]
  ep, _ = _run(box, acts, cfg)
  assert [t.rolled_back for t in ep.turns] == [False, True, False]
  assert box.read_file("keep.txt") == b"precious"
  assert "rolled back" in TOK.decode(ep.segments[0].tokens)


def test_sandbox_killed_from_the_host_is_an_infra_failure_not_a_crash(box):
  """The sandbox's processes are SIGKILLed from outside while the agent's command runs."""

  def killer():  # only processes this test started: bwrap descendants of this process
    time.sleep(1.0)
    sandbox_testing.kill_own_bwraps()

  t = threading.Thread(target=killer)
  t.start()
  ep, _ = _run(
    box, [CALL("shell", command="sleep 8"), CALL("shell", command="true"), CALL("finish")]
  )
  t.join()
  assert ep.finish_reason == "infra" and "SandboxError" in ep.infra_error


def test_engine_tokens_and_logprobs_match_the_trainers_forward(box):
  """Token-in/token-out with the real engine: the trainer's teacher-forced log-probs of the
  stored trajectory equal the engine's behaviour log-probs (no engine/trainer mismatch)."""
  from models import config as mcfg
  from models import transformer
  from models.inference.engine import Engine
  from models.inference.generator import Generator
  from rl.train_step import compute_logprobs

  cfg = mcfg.tiny("qwen3", vocab_size=TOK.vocab_size, max_seq_len=512)
  params = transformer.init(cfg, jax.random.key(3))
  gen = Generator(Engine(cfg, params, max_concurrent_decodes=4, max_seq_len=512), tokenizer=TOK)
  try:
    fmt = tool_format.ChatFormat(TOK, system_prompt="")
    acfg = agent.AgentConfig(max_turns=3, max_new_tokens=40, max_context_tokens=500)
    ep = agent.run_episode(gen, fmt, box, "say something", acfg, episode_id="eng", seed=5)
  finally:
    gen.close()
  assert ep.infra_error is None and ep.generated_tokens > 0
  (seg,) = ep.segments
  toks = np.asarray(seg.tokens, np.int32)[None]
  batch = {
    "tokens_BT": toks,
    "positions_BT": np.arange(toks.shape[1], dtype=np.int32)[None],
    "segment_ids_BT": np.ones_like(toks),
  }
  ref = np.asarray(jax.jit(compute_logprobs, static_argnums=2)(params, batch, cfg))[0]
  mask = np.asarray(seg.loss_mask, bool)
  np.testing.assert_allclose(np.asarray(seg.logprobs)[mask], ref[mask], atol=2e-4)
  assert set(np.asarray(seg.versions)[mask]) == {0}
