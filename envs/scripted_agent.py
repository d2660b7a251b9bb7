"""Agents that are not models: replay commands, run the reference solution, or do nothing.

`ScriptedAgent` replays a list of shell commands (from code or a file), `OracleAgent` runs the
task's reference solution (staged in the sandbox only for that run), `NullAgent` does nothing.
All share `run(sandbox, task) -> AgentRun`; the quality gate and evaluation use them.

Command files: `.json` / `.yaml` hold a list of commands (strings or `{command: ...}`, as in
Terminal-Bench's solution.yaml); any other file holds one command per line, where a trailing
backslash continues a line, a heredoc (`<<EOF` ... `EOF`) stays one command, and lines
starting with `#` are comments.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import shlex
import time
import uuid
from collections.abc import Sequence

import yaml

from envs.sandbox.base import ExecResult, Sandbox
from envs.task import FileEntry, Task
from envs.task_env import put_files


@dataclasses.dataclass(frozen=True)
class Step:
  command: str
  result: ExecResult


@dataclasses.dataclass(frozen=True)
class AgentRun:
  agent: str
  steps: tuple[Step, ...] = ()
  timed_out: bool = False
  duration_s: float = 0.0

  @property
  def commands(self) -> tuple[str, ...]:
    return tuple(s.command for s in self.steps)


def parse_commands(text: str) -> list[str]:
  """Splits a command file's text into commands (continuations and heredocs kept whole)."""
  out, buf, end_tag = [], [], None
  for line in text.splitlines():
    if end_tag is not None:
      buf.append(line)
      if line.strip() == end_tag:
        out.append("\n".join(buf))
        buf, end_tag = [], None
      continue
    if not buf and (not line.strip() or line.lstrip().startswith("#")):
      continue
    buf.append(line)
    if line.endswith("\\"):
      continue
    m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
    if m:
      end_tag = m.group(1)
      continue
    out.append("\n".join(buf))
    buf = []
  if buf:
    out.append("\n".join(buf))
  return out


def load_commands(path: str | pathlib.Path) -> list[str]:
  p = pathlib.Path(path)
  if p.suffix in (".json", ".yaml", ".yml"):
    data = json.loads(p.read_text()) if p.suffix == ".json" else yaml.safe_load(p.read_text())
    if not isinstance(data, list):
      raise ValueError(f"{p}: expected a list of commands")
    cmds = [d.get("command") if isinstance(d, dict) else d for d in data]
    for i, c in enumerate(cmds):
      if not isinstance(c, str):
        raise ValueError(f"{p}: item {i}: expected a command string")
    return cmds
  return parse_commands(p.read_text())


class NullAgent:
  """Does nothing: its score says what the untouched environment earns (it must fail)."""

  name = "null"

  def run(self, sb: Sandbox, task: Task) -> AgentRun:
    return AgentRun(self.name)


class ScriptedAgent:
  """Replays shell commands in order within the task's agent time budget."""

  def __init__(
    self,
    commands: Sequence[str],
    name: str = "scripted",
    command_timeout_s: float | None = None,
    stop_on_error: bool = False,
  ):
    self.commands = list(commands)
    self.name = name
    self.command_timeout_s = command_timeout_s
    self.stop_on_error = stop_on_error

  @classmethod
  def from_file(cls, path: str | pathlib.Path, **kw) -> ScriptedAgent:
    kw.setdefault("name", f"scripted:{pathlib.Path(path).name}")
    return cls(load_commands(path), **kw)

  def run(self, sb: Sandbox, task: Task) -> AgentRun:
    t0 = time.monotonic()
    steps = []
    for cmd in self.commands:
      left = task.agent_timeout_s - (time.monotonic() - t0)
      if left <= 0:
        return AgentRun(self.name, tuple(steps), True, time.monotonic() - t0)
      limit = min(left, self.command_timeout_s or left)
      r = sb.exec(cmd, timeout_s=limit)
      steps.append(Step(cmd, r))
      if r.timed_out and limit == left:
        return AgentRun(self.name, tuple(steps), True, time.monotonic() - t0)
      if self.stop_on_error and r.exit_code != 0:
        break
    return AgentRun(self.name, tuple(steps), False, time.monotonic() - t0)


class OracleAgent:
  """Runs the task's reference solution from a staging folder it removes afterwards."""

  name = "oracle"

  def run(self, sb: Sandbox, task: Task) -> AgentRun:
    t0 = time.monotonic()
    stage = f"/tmp/.agentrl-oracle-{uuid.uuid4().hex[:12]}"
    files = task.solution_files + (FileEntry("solve.sh", task.solution_script.encode(), 0o755),)
    put_files(sb, stage, files)
    cmd = f"cd {shlex.quote(task.workdir)} && SOLUTION_DIR={stage} bash {stage}/solve.sh"
    r = sb.exec(cmd, timeout_s=task.agent_timeout_s)
    sb.exec(f"rm -rf {stage}", timeout_s=30)
    return AgentRun(self.name, (Step(cmd, r),), r.timed_out, time.monotonic() - t0)
