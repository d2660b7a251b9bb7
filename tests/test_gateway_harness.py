"""External harnesses as the rollout agent: a real mini-swe-agent run (its DefaultAgent, our
bwrap sandbox, the gateway as its model) solves a core task with an oracle-backed scripted
policy behind the HTTP API; crashing and overrunning harnesses are infrastructure failures."""

import json
import threading

from envs.agents import agent
from envs.gateway import BackgroundServer, Gateway, make_app
from envs.harness import ExternalEpisodes
from envs.task import BUILTIN_DIR, load_task
from models.io.tokenizer import ByteTokenizer

TASK = load_task(BUILTIN_DIR / "core" / "fo-mkdir-tree", "core")
TOK = ByteTokenizer()


def _bash_call(command: str) -> str:
  args = json.dumps({"name": "bash", "arguments": {"command": command}})
  return f"Running it.<tool_call>{args}</tool_call>"


def _external(actions, harness, **kw):
  policy = agent.ScriptedPolicy(TOK, actions)
  gw = Gateway(policy, TOK, model_name="oracle")
  srv = BackgroundServer(make_app(gw))
  return ExternalEpisodes(gw, srv, harness, **kw), srv, policy


def test_mini_swe_agent_solves_a_core_task_through_the_gateway():
  from envs.harness.mini_swe import SUBMIT, run_mini_swe_agent

  actions = [_bash_call(TASK.solution_script), _bash_call(f"echo {SUBMIT}")]
  harness = lambda url, runner, instr: run_mini_swe_agent(url, runner, instr, model_name="oracle")
  episodes, srv, policy = _external(actions, harness)
  try:
    out = episodes(TASK, "mini-1", seed=0)
  finally:
    srv.close()
  assert out.infra_error is None and out.passed and out.reward == 1.0
  assert out.harness_result["exit_status"] == "Submitted"
  ep = out.episode
  assert len(ep.turns) == policy.calls == 2 and ep.elisions == 0
  (seg,) = ep.segments  # the second call extended the first call's exact tokens
  assert policy.prompts[1][: len(policy.prompts[0])] == policy.prompts[0]
  assert seg.tokens[: len(policy.prompts[1])] == policy.prompts[1]
  acts = [TOK.encode(a) for a in actions]
  assert [t for t, m in zip(seg.tokens, seg.loss_mask, strict=True) if m] == acts[0] + acts[1]
  assert "mkdir -p project/src" in ep.turns[0].command
  text = TOK.decode(policy.prompts[0])
  assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in text  # mini-swe-agent's own prompt
  assert TASK.instruction.strip()[:40] in text and '"name": "bash"' in text


def test_crashing_and_overrunning_harnesses_are_infrastructure_failures():
  def crash(url, runner, instr):
    runner.run("echo hi")
    raise RuntimeError("harness bug")

  episodes, srv, _ = _external(["x"], crash)
  try:
    out = episodes(TASK, "crash-1", seed=0)
    assert out.infra_error.startswith("harness crashed: RuntimeError: harness bug")
    assert out.episode.finish_reason == "infra" and not out.passed
    release = threading.Event()

    def hang(url, runner, instr):
      release.wait(timeout=120)

    episodes.agent.harness, episodes.agent.harness_timeout_s = hang, 1.0
    out = episodes(TASK, "hang-1", seed=0)
    release.set()
    assert out.infra_error == "harness timed out after 1 s" and out.reward == 0.0
    assert out.episode.episode_id == "hang-1"
    assert episodes.gateway.episode_ids == []  # every attempt's episode is closed: late calls 404
  finally:
    srv.close()


def test_a_harness_that_runs_out_of_time_is_graded_as_an_agent_timeout():
  """The grader hears that an external harness ran out of its time budget, as it does for the
  model loop (ExternalEpisodes used to grade it as if the harness had finished)."""
  seen = []

  def slow(url, runner, instr):
    seen.append(runner.run("sleep 60"))  # cut at the 2 s budget
    seen.append(runner.run("echo too late"))  # refused: the budget is spent
    return "gave up"

  episodes, srv, _ = _external(["x"], slow, harness_timeout_s=2.0)
  try:
    out = episodes(TASK, "slow-1", seed=0)
  finally:
    srv.close()
  assert out.infra_error is None and out.failure_mode == "agent_timeout", out.infra_error
  assert out.episode.finish_reason == "time_budget" and out.episode.timed_out
  assert not out.passed and out.reward == 0.0 and out.harness_result == "gave up"
  assert [r.timed_out for r in seen] == [True, True] and seen[1].stdout == ""


def test_plain_openai_client_example_is_a_harness():
  import importlib.util
  import pathlib

  path = pathlib.Path(__file__).parents[1] / "examples" / "openai_client_agent.py"
  spec = importlib.util.spec_from_file_location("openai_client_agent", path)
  example = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(example)
  shell = json.dumps({"name": "shell", "arguments": {"command": TASK.solution_script}})
  actions = [f"<tool_call>{shell}</tool_call>", '<tool_call>{"name": "finish"}</tool_call>']
  said = []
  harness = lambda url, runner, instr: example.run(
    url, runner, instr, model="oracle", on_turn=lambda *a: said.append(a)
  )
  episodes, srv, policy = _external(actions, harness)
  try:
    out = episodes(TASK, "plain-1", seed=0)
  finally:
    srv.close()
  assert out.passed and out.harness_result == {"finished": True, "turns": 2}
  assert said[0][0] == 1 and said[0][1].startswith("shell ") and said[1] == (2, "finish")
  # A conversation longer than the model's context ends the episode, with one progress line.
  gw = Gateway(agent.ScriptedPolicy(TOK, actions), TOK, model_name="oracle", max_seq_len=32)
  with BackgroundServer(make_app(gw)) as small:
    said.clear()
    got = example.run(small.base_url(), None, TASK.instruction, model="oracle",
                      on_turn=lambda *a: said.append(a))  # fmt: skip
  assert got == {"finished": False, "turns": 0, "stop": "context_length_exceeded"}
  assert said == [(1, "the conversation no longer fits the model's context: stopped")]
  assert len(out.episode.segments) == 1 and out.episode.generated_tokens == sum(
    len(TOK.encode(a)) for a in actions
  )
