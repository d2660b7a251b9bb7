"""Per-episode capture: every call's exact tokens, assembled into the agent's trajectory type.

Assembly follows envs.agents.agent's segment rules: a call whose prompt extends a segment's tokens
(prompt + completions so far) continues that segment (the new prompt tokens are context, loss
mask 0; the completion has mask 1 with the engine's log-probs and policy versions). A call
whose prompt extends no segment starts a new one (the earlier turns are then plain context),
counted in `breaks`; the n > 1 siblings of one call share its prompt and are not breaks.
Every generated token is therefore trained exactly once.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from envs.agents import agent as agent_lib


@dataclasses.dataclass(frozen=True)
class Call:
  prompt_tokens: tuple[int, ...]
  completion_tokens: tuple[int, ...]
  logprobs: tuple[float, ...]
  versions: tuple[int, ...]
  finish_reason: str
  text: str
  tool: str | None = None  # the first tool call's name, if any
  gen_s: float = 0.0


def _extends(prompt, tokens) -> bool:
  return len(prompt) >= len(tokens) and tuple(prompt[: len(tokens)]) == tuple(tokens)


def assemble(calls) -> tuple[list[agent_lib.Segment], int]:
  """(segments, breaks) of an episode's calls, in call order (module docstring)."""
  segments: list[agent_lib.Segment] = []
  prompts: set[tuple[int, ...]] = set()
  breaks = 0
  for call in calls:
    seg = next((s for s in reversed(segments) if _extends(call.prompt_tokens, s.tokens)), None)
    if seg is None:
      if segments and call.prompt_tokens not in prompts:
        breaks += 1
      seg = agent_lib.Segment()
      segments.append(seg)
    seg.extend(call.prompt_tokens[len(seg.tokens) :])
    seg.extend(call.completion_tokens, 1, call.logprobs, call.versions)
    prompts.add(call.prompt_tokens)
  for s in segments:
    s.trim()
  return segments, breaks


class EpisodeCapture:
  """The calls of one episode (thread-safe) and, for chat, the state a continuation needs."""

  def __init__(self, episode_id: str):
    self.episode_id = episode_id
    self.calls: list[Call] = []
    self.chat_heads: list[tuple[list[dict], tuple[int, ...]]] = []  # (messages, tokens) per reply
    self.lock = threading.Lock()
    self.start = time.monotonic()

  def record(self, call: Call) -> None:
    with self.lock:
      self.calls.append(call)

  def set_heads(self, heads) -> None:
    with self.lock:
      self.chat_heads = list(heads)

  def heads(self):
    with self.lock:
      return list(self.chat_heads)

  def episode(self, finish_reason: str = "harness_exit", infra_error: str | None = None):
    """The captured trajectory as an envs.agents.agent.Episode (one TurnRecord per call)."""
    with self.lock:
      calls = list(self.calls)
    segments, breaks = assemble(calls)
    turns = [
      agent_lib.TurnRecord(c.text, c.tool, None, gen_tokens=len(c.completion_tokens), gen_s=c.gen_s)
      for c in calls
    ]
    return agent_lib.Episode(
      self.episode_id,
      segments or [agent_lib.Segment()],
      turns,
      finish_reason,
      infra_error,
      elisions=breaks,
      duration_s=time.monotonic() - self.start,
    )
