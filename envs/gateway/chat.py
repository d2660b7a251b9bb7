"""OpenAI chat messages <-> the model's chat template and tool-call format.

Tools are described to the model in the system message and called in the agent's format
(envs.agents.tool_format: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`), so a checkpoint
trained by our agent loop serves OpenAI `tools` unchanged. An assistant message with
`tool_calls` is rendered back in that format.

Token-exact continuation: when a request repeats the previous call's messages and the assistant
reply the gateway returned, only the text after that reply is rendered (the template is
rendered once with a placeholder for the reply, as envs.agents.tool_format.ChatFormat does), and its tokens
are appended to the tokens the engine produced: no earlier turn is ever re-tokenised.
"""

from __future__ import annotations

import json
import re
import uuid

from envs.agents.tool_format import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from envs.gateway.protocol import content_text

_PLACEHOLDER = "\x1eAGENTRL_REPLY\x1e"
_CALL_RE = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


def tools_prompt(tools) -> str:
  """The system-prompt text that describes `tools` (OpenAI function objects) to the model."""
  lines = [
    "You may call tools. Call one with exactly this format:",
    f'{TOOL_CALL_OPEN}{{"name": "<tool name>", "arguments": {{...}}}}{TOOL_CALL_CLOSE}',
    "Tools:",
  ]
  for fn in tools:
    spec = {"name": fn["name"], "description": fn.get("description", "")}
    spec["parameters"] = fn.get("parameters", {})
    lines.append(json.dumps(spec, sort_keys=True))
  return "\n".join(lines)


def call_text(name: str, arguments) -> str:
  """One tool call in the model's format (arguments: a JSON string or an object)."""
  if isinstance(arguments, str):
    try:
      arguments = json.loads(arguments)
    except json.JSONDecodeError:
      pass
  return TOOL_CALL_OPEN + json.dumps({"name": name, "arguments": arguments}) + TOOL_CALL_CLOSE


def parse_tool_calls(text: str, names) -> tuple[str, list[dict]]:
  """(content, OpenAI tool_calls) of a completion; no calls if any block is malformed."""
  start = text.find(TOOL_CALL_OPEN)
  if start < 0:
    return text, []
  calls = []
  for m in _CALL_RE.finditer(text, start):
    try:
      obj = json.loads(m.group(1))
    except json.JSONDecodeError:
      return text, []
    args = obj.get("arguments", {}) if isinstance(obj, dict) else None
    if not isinstance(obj, dict) or obj.get("name") not in names or not isinstance(args, dict):
      return text, []
    calls.append(
      {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": obj["name"], "arguments": json.dumps(args)},
      }
    )
  return (text[:start], calls) if calls else (text, [])


class ChatRenderer:
  """Normalises messages and renders them with the tokenizer's chat template."""

  def __init__(self, tokenizer):
    self.tokenizer = tokenizer
    self.tool_role = "tool"
    probe = [{"role": "user", "content": "x"}, {"role": "tool", "content": "probe"}]
    try:
      if "probe" not in tokenizer.apply_chat_template(probe, add_generation_prompt=True):
        self.tool_role = "user"
    except Exception:  # templates without a tool role: the response goes in a user turn
      self.tool_role = "user"

  def normalize(self, messages, tools=()) -> list[dict]:
    """Template-ready {role, content} dicts; the tools' description joins the system message."""
    out = []
    for i, m in enumerate(messages):
      role, text = m["role"], content_text(m.get("content"), f"messages[{i}].content")
      if role == "developer":
        role = "system"
      if role == "assistant":
        text += "".join(
          call_text(c["function"]["name"], c["function"].get("arguments", "{}"))
          for c in m.get("tool_calls") or []
        )
      if role == "tool" and self.tool_role == "user":
        role, text = "user", f"<tool_response>\n{text}\n</tool_response>"
      out.append({"role": role, "content": text})
    if tools:
      desc = tools_prompt(tools)
      if out and out[0]["role"] == "system":
        out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{desc}"}
      else:
        out.insert(0, {"role": "system", "content": desc})
    return out

  def render(self, norm) -> str:
    return self.tokenizer.apply_chat_template(norm, add_generation_prompt=True)

  def continuation(self, prev, norm) -> str | None:
    """Text after the assistant reply `prev[-1]` when `norm` extends `prev`; else None."""
    k = len(prev)
    if len(norm) <= k or norm[:k] != prev:
      return None
    msgs = prev[:-1] + [{"role": "assistant", "content": _PLACEHOLDER}] + norm[k:]
    text = self.render(msgs)
    i = text.find(_PLACEHOLDER)
    return None if i < 0 else text[i + len(_PLACEHOLDER) :]
