"""The agent loop speaking markdown-bash in a real bubblewrap sandbox: token-in/token-out is
exact (one re-render of the finished episode equals the episode's tokens, observations
masked), format errors become observations, the sentinel runs its block then finishes."""

import pytest

from envs import sandbox as sandbox_lib
from envs.agents import agent
from envs.agents import markdown_bash as mb
from envs.sandbox.base import SandboxSpec
from models.io import hf
from models.io.tokenizer import ByteTokenizer
from rl.config import from_config

ACTIONS = [
  "Let me look.\n\n```bash\nls -A | wc -l\n```",
  "```bash\nprintf 'h\\303\\251llo\\n' > notes.txt && cat notes.txt\n```",
  "Oops.\n```sh\nwrong\n```",  # a format error: its message is the next observation
  f"Done.\n\n```bash\necho bye > done.txt\n{mb.SENTINEL}\n```",
]


@pytest.fixture
def box():
  sb = sandbox_lib.make("bwrap", SandboxSpec(exec_timeout_s=20, episode_timeout_s=120))
  yield sb
  sb.close()


def _episode(box, tok, instruction):
  cfg = agent.AgentConfig(max_turns=6, protocol="markdown_bash")
  fmt = agent.make_format(cfg.protocol, tok)
  policy = agent.ScriptedPolicy(tok, ACTIONS, append_eos=True)
  ep = agent.run_episode(policy, fmt, box, instruction, cfg, episode_id="mb1")
  return fmt, ep, policy


def _observations(tok, seg):
  """The masked runs between generated runs, decoded (the observation turns)."""
  runs, cur, gen = [], [], False
  for t, m in zip(seg.tokens, seg.loss_mask, strict=True):
    if m and not gen and cur:
      runs.append(tok.decode(cur))
      cur = []
    gen = bool(m)
    if not m:
      cur.append(t)
  return runs[1:]  # the first run is the prompt


def _check_exact(box, tok, fmt, ep, policy, instruction):
  assert ep.finish_reason == "finish" and ep.infra_error is None
  assert [t.tool for t in ep.turns] == ["shell", "shell", None, "finish"]
  assert ep.turns[2].error and "no ```bash block found" in ep.turns[2].error
  assert box.read_file("notes.txt") == "héllo\n".encode() and box.read_file("done.txt") == b"bye\n"
  (seg,) = ep.segments
  eos = tok.eos_id
  gen = [t for t, m in zip(seg.tokens, seg.loss_mask, strict=True) if m]
  assert gen == [t for a in ACTIONS for t in tok.encode(a) + [eos]]  # the engine's tokens, all
  for a, b in zip(policy.prompts, policy.prompts[1:], strict=False):
    assert b[: len(a)] == a  # each turn's prompt extends the last: session prefix reuse
  # What the model saw after each action, rebuilt from the sandbox's real outputs.
  observations = [
    mb.format_output(0, "0\n", ""),
    mb.format_output(0, "héllo\n", ""),
    ep.turns[2].error,
  ]
  whole = tok.encode(fmt.render_episode(instruction, ACTIONS, observations))
  assert whole[: len(seg.tokens)] == seg.tokens
  assert all(o in ob for o, ob in zip(observations, _observations(tok, seg), strict=True))
  context = tok.decode([t for t, m in zip(seg.tokens, seg.loss_mask, strict=True) if not m])
  assert fmt.system_prompt in context and instruction in context


def test_markdown_bash_episode_on_the_byte_tokenizer(box):
  tok, instruction = ByteTokenizer(), "Write héllo to notes.txt, then finish."
  fmt, ep, policy = _episode(box, tok, instruction)
  _check_exact(box, tok, fmt, ep, policy, instruction)


def test_markdown_bash_episode_on_the_smollm2_tokenizer(box):
  tok, instruction = hf.load_tokenizer("smollm2-135m-instruct"), "Write héllo to notes.txt."
  fmt, ep, policy = _episode(box, tok, instruction)
  _check_exact(box, tok, fmt, ep, policy, instruction)
  assert tok.decode(ep.segments[0].tokens).count("<|im_start|>user") == 4  # instruction + 3


def test_protocol_is_validated_at_config_parse():
  with pytest.raises(ValueError, match=r"config: AgentConfig.protocol: 'bash' is not one of"):
    from_config(agent.AgentConfig, {"protocol": "bash"})
  assert from_config(agent.AgentConfig, {"protocol": "markdown_bash"}).protocol == "markdown_bash"


def test_make_format_keeps_each_protocols_prompt():
  tok = ByteTokenizer()
  assert agent.make_format("markdown_bash", tok).system_prompt == mb.load_system_prompt()
  # EnvConfig's default prompt is the tool-call one: markdown-bash keeps its versioned file.
  tool_default = agent.make_format("tool_call", tok).system_prompt
  assert agent.make_format("markdown_bash", tok, tool_default).system_prompt == (
    mb.load_system_prompt()
  )
  assert agent.make_format("markdown_bash", tok, "Be brief.").system_prompt == "Be brief."
  assert agent.make_format("tool_call", tok).stop_strings == ("</tool_call>",)
  assert agent.make_format("markdown_bash", tok).stop_strings == ()
