"""The markdown-bash agent protocol: what instruct models follow zero-shot (mini-swe-agent's).

Each assistant reply holds exactly one fenced ```bash block; the block runs in the sandbox
and its exit code and output come back as the next *user* turn. The episode ends when the
block's last line is the sentinel command `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` (lines
before it still run first). A reply with no block, or more than one, gets a format-error
observation and the episode goes on. The system prompt is a versioned file under
envs/prompts/ (`load_system_prompt`); a system prompt `markdown_bash_v<N>` names that file.

Token-in/token-out: the turns are rendered with the checkpoint's own chat template. The prompt
is one render; after each action only the *new* text (end of the assistant turn, the user
turn with the output, the next generation prompt) is rendered, from a render with a
placeholder action, and tokenised; earlier turns are never re-tokenised, so an episode's
tokens are exactly prompt + engine tokens + observation tokens (observation mask 0).
`render_episode` re-renders a finished episode in one go, which tests compare against.

Pure: no sandbox, no engine; the agent loop drives it (`agent.protocol=markdown_bash`).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re

from envs.agents.tool_format import (
  ToolCall,
  ToolCallError,
  delta_tokens,
  render_delta,
  truncate_middle,
)

SENTINEL = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
PROMPT_VERSION = 1
_BLOCK_RE = re.compile(r"```bash[ \t]*\n(.*?)```", re.DOTALL)
FORMAT_ERROR = (
  "Format error: {problem}. Reply with exactly one command block:\n\n```bash\n<command>\n```\n\n"
  f"When the task is done, run `{SENTINEL}` alone in the block."
)


class FormatError(ToolCallError):
  """A reply that is not exactly one ```bash block; its message is the observation."""


@dataclasses.dataclass(frozen=True)
class BashAction:
  command: str  # what to run ("" when the block held only the sentinel)
  finish: bool  # the block ended with the sentinel: run `command`, then end the episode


def load_system_prompt(version: int = PROMPT_VERSION) -> str:
  """The prompt text of envs/prompts/markdown_bash_v{version}.md (front matter dropped)."""
  name = f"markdown_bash_v{version}.md"
  try:
    text = importlib.resources.files("envs").joinpath("prompts", name).read_text()
  except FileNotFoundError:
    raise ValueError(
      f"envs/prompts/{name}: no markdown-bash system prompt version {version}"
    ) from None
  parts = text.split("---\n", 2)
  if len(parts) != 3 or parts[0]:
    raise ValueError(f"envs/prompts/{name}: must start with a '---' front matter block")
  if f"version: {version}\n" not in parts[1]:
    raise ValueError(f"envs/prompts/{name}: front matter does not say 'version: {version}'")
  return parts[2].strip("\n")


def parse_action(text: str) -> BashAction:
  """The one ```bash block of a reply; raises FormatError saying what is wrong."""
  blocks = _BLOCK_RE.findall(text)
  if len(blocks) != 1:
    problem = "no ```bash block found" if not blocks else f"{len(blocks)} ```bash blocks found"
    raise FormatError(FORMAT_ERROR.format(problem=problem))
  lines = blocks[0].rstrip("\n").split("\n")
  finish = lines[-1].strip() == SENTINEL
  command = "\n".join(lines[:-1] if finish else lines).strip("\n")
  if not finish and not command.strip():
    raise FormatError(FORMAT_ERROR.format(problem="the ```bash block is empty"))
  return BashAction(command, finish)


def format_action(command: str) -> str:
  """The canonical reply running `command` (for demonstrations and tests)."""
  return f"```bash\n{command}\n```"


def format_output(exit_code: int, stdout: str, stderr: str, *, timed_out: bool = False,
                  max_chars: int = 4000) -> str:  # fmt: skip
  """The user turn after a command: exit code, then stdout and stderr (middle-truncated)."""
  head = f"<returncode>{exit_code}</returncode>" + (" (timed out)" if timed_out else "")
  out = stdout
  if stderr:  # one stream, as a terminal shows it (mini-swe-agent runs with 2>&1)
    out = (stdout.rstrip("\n") + "\n" if stdout else "") + stderr
  return f"{head}\n<output>\n{truncate_middle(out, max_chars).rstrip(chr(10))}\n</output>"


class MarkdownBashFormat:
  """Instructions and observations as tokens, with the tokenizer's chat template.

  The same interface as envs.agents.tool_format.ChatFormat (`prompt`, `observation(text,
  after_stop)`, `stop_ids`, `stop_strings`, `parse`, `format_output`), which the agent loop
  speaks; plus `render_episode` for checks.
  """

  name = "markdown_bash"
  stop_strings = ()  # a reply ends with the assistant turn (EOS)

  def __init__(self, tokenizer, system_prompt: str | None = None):
    self.tokenizer = tokenizer
    if system_prompt is not None and re.fullmatch(r"markdown_bash_v\d+", system_prompt):
      system_prompt = load_system_prompt(int(system_prompt.rsplit("v", 1)[1]))  # a version's file
    self.system_prompt = load_system_prompt() if system_prompt is None else system_prompt
    self.stop_ids = tuple(getattr(tokenizer, "stop_ids", (tokenizer.eos_id,)))
    self._head = [{"role": "system", "content": self.system_prompt}]
    self._delta("probe")  # fails now, not mid-episode, if the template drops a turn

  @staticmethod
  def parse(text: str) -> ToolCall:
    """The reply as the agent loop's action: `shell`, or `finish` (its `command` runs first)."""
    act = parse_action(text)
    return ToolCall("finish" if act.finish else "shell", {"command": act.command})

  format_output = staticmethod(format_output)

  def prompt(self, instruction: str) -> list[int]:
    msgs = self._head + [{"role": "user", "content": instruction}]
    return self.tokenizer.encode(
      self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
    )

  def _delta(self, text: str) -> str:
    return render_delta(self.tokenizer, self._head, "user", text)

  def observation(self, text: str, after_stop: int | None = None) -> list[int]:
    """Tokens after an action; `after_stop`: the stop token the action already ended with."""
    return delta_tokens(self.tokenizer, self._delta(text), after_stop)

  def render_episode(self, instruction: str, actions: list[str], observations: list[str]) -> str:
    """The whole episode in one template render (actions[i] is followed by observations[i])."""
    msgs = self._head + [{"role": "user", "content": instruction}]
    for i, action in enumerate(actions):
      msgs.append({"role": "assistant", "content": action})
      if i < len(observations):
        msgs.append({"role": "user", "content": observations[i]})
    return self.tokenizer.apply_chat_template(msgs, add_generation_prompt=False)
