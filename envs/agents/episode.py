"""The one agent protocol and the record of what an agent did: `Episode`.

Every agent (the model loop `envs.agents.agent.LoopAgent`, the scripted, oracle and null
agents of `envs.agents.scripted`, an external harness `envs.harness.HarnessAgent`) has a `name`
and

  run(sandbox, task, seed=0, on_turn=None, episode_id=None) -> Episode

`on_turn(n)` is called after the agent's n-th turn has acted (the evaluation's milestone
checks). An Episode with `infra_error` set is retried or masked by the caller, never reward 0;
`finish_reason == "time_budget"` tells the grader the agent ran out of time. Model agents fill
`segments` (the tokens the engine produced, for training); shell agents leave one empty segment.
This module imports nothing heavy: the evaluation and the quality gate use it without JAX.
"""

from __future__ import annotations

import dataclasses

OUT_CHARS = 2000  # per-turn output kept in a trajectory record


def tail(text: str) -> str:
  """The last OUT_CHARS characters of `text` (marked when cut)."""
  return text if len(text) <= OUT_CHARS else "[...]" + text[-OUT_CHARS:]


def time_budget(task, limit_s: float = 0.0) -> float:
  """The agent's wall-clock budget: the task's agent timeout, or `limit_s` when tighter."""
  return min(limit_s or task.agent_timeout_s, task.agent_timeout_s)


@dataclasses.dataclass
class Segment:
  """One training row: a context the engine saw, token for token.

  `loss_mask` is 1 on tokens this segment's engine session generated; `logprobs` and
  `versions` are the engine's behaviour logprobs and policy versions there (0 / -1 elsewhere).
  """

  tokens: list[int] = dataclasses.field(default_factory=list)
  loss_mask: list[int] = dataclasses.field(default_factory=list)
  logprobs: list[float] = dataclasses.field(default_factory=list)
  versions: list[int] = dataclasses.field(default_factory=list)

  def trim(self) -> None:
    """Drops trailing context after the last generated token (an observation nobody answers)."""
    ends = [i for i, m in enumerate(self.loss_mask) if m]
    n = ends[-1] + 1 if ends else len(self.tokens)
    for f in ("tokens", "loss_mask", "logprobs", "versions"):
      del getattr(self, f)[n:]

  def extend(self, tokens, mask=0, logprobs=None, versions=None):
    n = len(tokens)
    self.tokens += list(tokens)
    self.loss_mask += [mask] * n
    self.logprobs += list(logprobs) if logprobs is not None else [0.0] * n
    self.versions += list(versions) if versions is not None else [-1] * n


@dataclasses.dataclass
class TurnRecord:
  action: str
  tool: str | None
  error: str | None  # tool-call parse error, if any
  exit_code: int | None = None
  command: str | None = None  # what ran: the shell command, or "write_file <path>"
  gen_tokens: int = 0
  gen_s: float = 0.0
  env_s: float = 0.0
  rolled_back: bool = False
  timed_out: bool = False  # the command hit its time limit
  output: str | None = None  # a shell agent's command output (tail)

  def to_dict(self) -> dict:
    """The trajectory entry of an evaluation record."""
    keys = ("action", "tool", "command", "error", "exit_code", "timed_out", "gen_tokens")
    d = {k: getattr(self, k) for k in keys}
    return d if self.output is None else {**d, "output": self.output}


@dataclasses.dataclass
class Episode:
  """What one episode produced; `infra_error` set means: retry or mask, never reward 0."""

  episode_id: str
  segments: list[Segment]
  turns: list[TurnRecord]
  # finish | script_end | max_turns | token_budget | time_budget | context | harness_exit | infra
  finish_reason: str
  infra_error: str | None = None
  elisions: int = 0
  duration_s: float = 0.0
  result: object = None  # what an external harness returned

  @property
  def generated_tokens(self) -> int:
    return sum(sum(s.loss_mask) for s in self.segments)

  @property
  def min_version(self) -> int:
    vs = [v for s in self.segments for v, m in zip(s.versions, s.loss_mask, strict=True) if m]
    return min(vs) if vs else -1

  @property
  def text(self) -> str:
    return "".join(t.action for t in self.turns)

  @property
  def timed_out(self) -> bool:
    """The agent ran out of its time budget (the grader's `agent_timed_out`)."""
    return self.finish_reason == "time_budget"

  @property
  def commands(self) -> tuple[str, ...]:
    return tuple(t.command for t in self.turns if t.command is not None)


def empty_episode(episode_id: str, finish_reason: str, infra_error: str | None = None, **kw):
  """An episode with no turns (an agent that did nothing, or one that never ran)."""
  return Episode(episode_id, [Segment()], [], finish_reason, infra_error, **kw)
