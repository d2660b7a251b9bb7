"""envs.agents.markdown_bash: parsing, observations, the prompt file, and token-exact episodes on the
real SmolLM2 tokenizer (named checkpoint, converted once into the cache)."""

import pytest

from envs.agents import markdown_bash as mb
from models.io import hf

NAME = "smollm2-135m-instruct"


def test_parse_one_block():
  reply = "I will look around.\n\n```bash\nls -la\ncat a.txt\n```\nThen I decide."
  assert mb.parse_action(reply) == mb.BashAction("ls -la\ncat a.txt", finish=False)
  assert mb.parse_action(mb.format_action("echo hi")) == mb.BashAction("echo hi", finish=False)


def test_parse_sentinel_finishes():
  assert mb.parse_action(mb.format_action(mb.SENTINEL)) == mb.BashAction("", finish=True)
  both = mb.format_action(f"echo done > out.txt\n{mb.SENTINEL}")
  assert mb.parse_action(both) == mb.BashAction("echo done > out.txt", finish=True)
  # The sentinel in the middle is not the end: the block runs as a plain command.
  mid = mb.format_action(f"{mb.SENTINEL}\nls")
  assert mb.parse_action(mid) == mb.BashAction(f"{mb.SENTINEL}\nls", finish=False)


@pytest.mark.parametrize(
  "reply,problem",
  [
    ("just talk, no block", "no ```bash block found"),
    ("```python\nprint(1)\n```", "no ```bash block found"),
    ("```bash\nls\n```\n```bash\npwd\n```", "2 ```bash blocks found"),
    ("```bash\n\n```", "the ```bash block is empty"),
  ],
)
def test_parse_errors_say_what_is_wrong(reply, problem):
  with pytest.raises(mb.FormatError) as e:
    mb.parse_action(reply)
  assert str(e.value).startswith(f"Format error: {problem}.") and mb.SENTINEL in str(e.value)


def test_format_output():
  assert (
    mb.format_output(0, "a\nb\n", "") == "<returncode>0</returncode>\n<output>\na\nb\n</output>"
  )
  assert mb.format_output(1, "out", "err\n") == (
    "<returncode>1</returncode>\n<output>\nout\nerr\n</output>"
  )
  assert mb.format_output(124, "", "", timed_out=True) == (
    "<returncode>124</returncode> (timed out)\n<output>\n\n</output>"
  )
  assert mb.truncate_middle("abcdefghij", 4) == "ab\n[... 6 chars truncated ...]\nij"
  assert mb.format_output(0, "x" * 50, "", max_chars=10).count("x") == 10


def test_system_prompt_file_is_versioned_and_names_the_sentinel():
  text = mb.load_system_prompt(1)
  assert text == mb.load_system_prompt() and not text.startswith("---")
  assert mb.format_action(mb.SENTINEL) in text and "```bash" in text
  assert "protocol:" not in text  # the front matter is documentation, not prompt
  with pytest.raises(ValueError, match="no markdown-bash system prompt version 99"):
    mb.load_system_prompt(99)


@pytest.fixture(scope="module")
def tok():
  return hf.load_tokenizer(NAME)


_ACTIONS = [
  "Let me look first.\n\n```bash\nls -la\n```",
  "```bash\nprintf 'héllo 🙂\\n' > notes.txt && cat notes.txt\n```",
  "Oops.\n```sh\nwrong\n```",  # a format error, still part of the episode
  f"Done.\n\n```bash\n{mb.SENTINEL}\n```",
]


def _observation(action: str) -> str:
  try:
    act = mb.parse_action(action)
  except mb.FormatError as e:
    return str(e)
  return mb.format_output(0, f"ran: {act.command}\n  two  spaces\n", "")


def test_episode_tokens_equal_one_render(tok):
  fmt = mb.MarkdownBashFormat(tok)
  instruction = "Create notes.txt containing héllo, then finish."
  eos = tok.eos_id
  tokens = fmt.prompt(instruction)
  mask = [0] * len(tokens)
  observations = []
  for action in _ACTIONS:
    generated = tok.encode(action) + [eos]  # what the engine emits: the reply, then its stop
    tokens += generated
    mask += [1] * len(generated)
    if action == _ACTIONS[-1]:
      assert mb.parse_action(action).finish  # the sentinel ends it: no observation follows
      break
    observations.append(_observation(action))
    obs = fmt.observation(observations[-1], after_stop=eos)
    tokens += obs
    mask += [0] * len(obs)
  whole = tok.encode(fmt.render_episode(instruction, _ACTIONS, observations))
  # The one render ends the last assistant turn with "<|im_end|>\n"; the engine stopped at EOS.
  assert whole[: len(tokens)] == tokens and tok.decode(whole[len(tokens) :]) == "\n"
  assert tokens.count(eos) == 2 + len(_ACTIONS) + len(observations)  # 2: system, user turns
  trained = tok.decode([t for t, m in zip(tokens, mask, strict=True) if m])
  assert trained == "<|im_end|>".join(_ACTIONS) + "<|im_end|>"
  context = tok.decode([t for t, m in zip(tokens, mask, strict=True) if not m])
  assert all(o in context for o in observations) and fmt.system_prompt in context
  assert "You are a helpful AI assistant named SmolLM" not in context  # our system prompt won


def test_observation_without_stop_token_closes_the_turn(tok):
  fmt = mb.MarkdownBashFormat(tok)
  obs = tok.decode(fmt.observation("<returncode>0</returncode>"))
  assert (
    obs
    == "<|im_end|>\n<|im_start|>user\n<returncode>0</returncode><|im_end|>\n<|im_start|>assistant\n"
  )
