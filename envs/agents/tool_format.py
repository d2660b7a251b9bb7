"""The tool-call protocol and chat format the agent loop speaks (text <-> tokens).

Tool-call format (Qwen/Hermes style, so real chat checkpoints can use it). One call per turn:

  <tool_call>{"name": "shell", "arguments": {"command": "ls -la"}}</tool_call>
  <tool_call>{"name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}</tool_call>
  <tool_call>{"name": "finish", "arguments": {}}</tool_call>

Text before `<tool_call>` (reasoning) is allowed. Generation stops at the string `</tool_call>`
or at EOS. A malformed call (no call, bad JSON, unknown tool, missing/extra/non-string argument)
raises ToolCallError, whose message the agent loop shows the model as the observation.

`ChatFormat` renders instructions and observations with the tokenizer's chat template; only
the *new* text of each observation is tokenised, so earlier turns are never re-tokenised.
"""

from __future__ import annotations

import dataclasses
import json

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOLS: dict[str, tuple[str, ...]] = {
  "shell": ("command",),
  "write_file": ("path", "content"),
  "finish": (),
}
DEFAULT_SYSTEM_PROMPT = (
  "You are an agent in a Linux shell. Act with exactly one tool call per turn:\n"
  '<tool_call>{"name": "shell", "arguments": {"command": "..."}}</tool_call>\n'
  '<tool_call>{"name": "write_file", "arguments": {"path": "...", "content": "..."}}</tool_call>\n'
  '<tool_call>{"name": "finish", "arguments": {}}</tool_call>'
)
ELIDED = "[earlier output elided]"
_PLACEHOLDER = "\x1eAGENTRL_ACTION\x1e"


class ToolCallError(ValueError):
  """A malformed action (of any protocol); its message is shown to the model as the observation."""


@dataclasses.dataclass(frozen=True)
class ToolCall:
  name: str
  arguments: dict


def parse_tool_call(text: str) -> ToolCall:
  """Parses the first `<tool_call>` in `text`; raises ToolCallError naming what is wrong."""
  start = text.find(TOOL_CALL_OPEN)
  if start < 0:
    raise ToolCallError(f"no tool call found: write {TOOL_CALL_OPEN}{{...}}{TOOL_CALL_CLOSE}")
  body = text[start + len(TOOL_CALL_OPEN) :]
  end = body.find(TOOL_CALL_CLOSE)
  if end < 0:
    raise ToolCallError(f"tool call not closed with {TOOL_CALL_CLOSE}")
  try:
    obj = json.loads(body[:end])
  except json.JSONDecodeError as e:
    raise ToolCallError(f"tool call is not valid JSON: {e.msg} at char {e.pos}") from None
  if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
    raise ToolCallError('tool call must be a JSON object with a string "name"')
  name, args = obj["name"], obj.get("arguments", {})
  if name not in TOOLS:
    raise ToolCallError(f"unknown tool {name!r}; tools: {', '.join(TOOLS)}")
  if not isinstance(args, dict):
    raise ToolCallError(f'"arguments" of {name} must be a JSON object')
  missing = [a for a in TOOLS[name] if a not in args]
  extra = sorted(set(args) - set(TOOLS[name]))
  if missing or extra:
    raise ToolCallError(f"{name}: missing arguments {missing}, unexpected arguments {extra}")
  bad = [a for a in TOOLS[name] if not isinstance(args[a], str)]
  if bad:
    raise ToolCallError(f"{name}: arguments {bad} must be strings")
  return ToolCall(name, dict(args))


def format_tool_call(name: str, **arguments: str) -> str:
  """The canonical text of a call (used for demonstrations)."""
  return TOOL_CALL_OPEN + json.dumps({"name": name, "arguments": arguments}) + TOOL_CALL_CLOSE


def truncate_middle(text: str, max_chars: int) -> str:
  """Keeps the head and tail of `text` around a marker saying how much was cut."""
  if len(text) <= max_chars:
    return text
  head = max_chars // 2
  tail = max_chars - head
  cut = len(text) - head - tail
  return f"{text[:head]}\n[... {cut} chars truncated ...]\n{text[len(text) - tail :]}"


def format_exec_observation(exit_code: int, stdout: str, stderr: str, timed_out=False) -> str:
  """What the model sees after a shell command."""
  parts = [f"exit code: {exit_code}" + (" (timed out)" if timed_out else "")]
  if stdout:
    parts.append("stdout:\n" + stdout.rstrip("\n"))
  if stderr:
    parts.append("stderr:\n" + stderr.rstrip("\n"))
  return "\n".join(parts)


def render_delta(tokenizer, head: list[dict], role: str, content: str) -> str:
  """The template text after an assistant action: its end, a `role` turn, the generation prompt.

  One render of `head` + a user turn + a placeholder action + the `role` turn, cut after the
  placeholder, so tokenising it never re-tokenises earlier turns (token-in/token-out).
  """
  msgs = head + [
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": _PLACEHOLDER},
    {"role": role, "content": content},
  ]
  rendered = tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
  i = rendered.find(_PLACEHOLDER)
  if i < 0 or content not in rendered[i:]:
    raise ValueError(f"chat template dropped the assistant action or the {role} turn")
  return rendered[i + len(_PLACEHOLDER) :]


def delta_tokens(tokenizer, delta: str, after_stop: int | None) -> list[int]:
  """Tokens of `delta`; `after_stop`: the stop token the action already ended with (not twice)."""
  if after_stop is not None:
    stop_text = tokenizer.decode([after_stop])
    if stop_text and delta.startswith(stop_text):
      delta = delta[len(stop_text) :]
  return tokenizer.encode(delta)


class ChatFormat:
  """Turns instructions and observations into tokens with the tokenizer's chat template.

  `observation(text)` returns the tokens that follow a model action: the end of the assistant
  turn, the tool message and the next generation prompt (`render_delta`). The agent loop asks
  it for `parse`, `stop_strings` and `format_output`, as it asks envs.agents.markdown_bash's format.
  """

  name = "tool_call"
  stop_strings = (TOOL_CALL_CLOSE,)
  parse = staticmethod(parse_tool_call)

  def __init__(self, tokenizer, system_prompt: str = DEFAULT_SYSTEM_PROMPT):
    self.tokenizer = tokenizer
    self.system_prompt = system_prompt
    self.stop_ids = tuple(getattr(tokenizer, "stop_ids", (tokenizer.eos_id,)))
    self._head = [{"role": "system", "content": system_prompt}] if system_prompt else []
    self.tool_role = "tool"
    try:
      self._delta("probe")
    except Exception:  # templates without a tool role: the response goes in a user turn
      self.tool_role = "user"
      self._delta("probe")

  def prompt(self, instruction: str) -> list[int]:
    msgs = self._head + [{"role": "user", "content": instruction}]
    return self.tokenizer.encode(
      self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
    )

  def _delta(self, text: str) -> str:
    content = text if self.tool_role == "tool" else f"<tool_response>\n{text}\n</tool_response>"
    return render_delta(self.tokenizer, self._head, self.tool_role, content)

  def observation(self, text: str, after_stop: int | None = None) -> list[int]:
    """Tokens after an action; `after_stop`: the stop token the action already ended with."""
    return delta_tokens(self.tokenizer, self._delta(text), after_stop)

  @staticmethod
  def format_output(exit_code, stdout, stderr, *, timed_out=False, max_chars=2000) -> str:
    """The tool response after a shell command, middle-truncated to `max_chars`."""
    return truncate_middle(format_exec_observation(exit_code, stdout, stderr, timed_out), max_chars)
