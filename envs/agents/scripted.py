"""The agents that are not models: replay, reference solution, nothing.

They follow the one agent protocol of envs.agents.episode (`run(sandbox, task, seed=0,
on_turn=None, episode_id=None) -> Episode`), one shell turn per command; set-up and clean-up
commands are not turns. `ScriptedAgent` replays a list of shell commands (fixed, from a file,
or chosen per task), `OracleAgent` runs the task's reference solution (staged in the sandbox
only for that run; with `per_step`, one turn per `solution/steps/NN.sh`), `NullAgent` does
nothing. The quality gate and evaluation use them.

Command files: `.json` / `.yaml` hold a list of commands (strings or `{command: ...}`, as in
Terminal-Bench's solution.yaml); any other file holds one command per line, where a trailing
backslash continues a line, a heredoc (`<<EOF` ... `EOF`) stays one command, and lines
starting with `#` are comments.
"""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import time
import uuid
from collections.abc import Callable, Sequence

import yaml

from envs.agents.episode import Episode, TurnRecord, empty_episode, tail
from envs.sandbox.base import ExecResult, Sandbox
from envs.task import FileEntry, Task
from envs.task_env import TaskSetupError, put_files

_STEP_RE = re.compile(r"^steps/[^/]+\.sh$")


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


def shell_turn(cmd: str, r: ExecResult, env_s: float) -> TurnRecord:
  """A shell agent's turn: the command, its exit status and the tail of its output."""
  out = tail(r.stdout + ("\n" + r.stderr if r.stderr else ""))
  return TurnRecord(cmd, "shell", None, r.exit_code, cmd, env_s=env_s, timed_out=r.timed_out,
                    output=out)  # fmt: skip


def _episode_id(episode_id: str | None, name: str, task: Task, seed: int) -> str:
  return episode_id or f"{task.id}#{name}#{seed}"


class NullAgent:
  """Does nothing: its score says what the untouched environment earns (it must fail)."""

  name = "null"

  def run(self, sb: Sandbox, task: Task, seed=0, on_turn=None, episode_id=None) -> Episode:
    return empty_episode(_episode_id(episode_id, self.name, task, seed), "finish")


class ScriptedAgent:
  """Replays shell commands in order within the task's agent time budget.

  `commands`: a list, or a function of the task returning one (a folder of per-task scripts).
  """

  def __init__(
    self,
    commands: Sequence[str] | Callable[[Task], list[str]],
    name: str = "scripted",
    command_timeout_s: float | None = None,
    stop_on_error: bool = False,
  ):
    self.commands_for = commands if callable(commands) else (lambda task, c=list(commands): c)
    self.name = name
    self.command_timeout_s = command_timeout_s
    self.stop_on_error = stop_on_error

  @classmethod
  def from_file(cls, path: str | pathlib.Path, **kw) -> ScriptedAgent:
    kw.setdefault("name", f"scripted:{pathlib.Path(path).name}")
    return cls(load_commands(path), **kw)

  def run(self, sb: Sandbox, task: Task, seed=0, on_turn=None, episode_id=None) -> Episode:
    ep = empty_episode(_episode_id(episode_id, self.name, task, seed), "script_end")
    return self.replay(sb, task, self.commands_for(task), on_turn, ep)

  def replay(self, sb, task: Task, commands: Sequence[str], on_turn, ep: Episode) -> Episode:
    """Runs `commands` as `ep`'s turns; a command cut by the time budget ends the episode."""
    t0 = time.monotonic()
    for cmd in commands:
      left = task.agent_timeout_s - (time.monotonic() - t0)
      if left <= 0:
        ep.finish_reason = "time_budget"
        break
      limit = min(left, self.command_timeout_s or left)
      t1 = time.monotonic()
      r = sb.exec(cmd, timeout_s=limit)
      ep.turns.append(shell_turn(cmd, r, time.monotonic() - t1))
      if on_turn is not None:
        on_turn(len(ep.turns))
      if r.timed_out and limit == left:
        ep.finish_reason = "time_budget"
        break
      if self.stop_on_error and r.exit_code != 0:
        break
    ep.duration_s = time.monotonic() - t0
    return ep


def solution_steps(task: Task) -> list[str]:
  """Paths of the task's per-turn solution steps (solution/steps/*.sh), sorted; may be empty."""
  return sorted(f.path for f in task.solution_files if _STEP_RE.match(f.path))


class OracleAgent:
  """Runs the task's reference solution from a staging folder it removes afterwards
  (`/solution` for Harbor tasks, as Harbor puts it, where the root is writable).

  Default: `solve.sh` in the task's workdir, one turn (the quality gate's oracle). `per_step`:
  one turn per `solution/steps/NN.sh` if the task has them, else `solve.sh` (the evaluation's).
  """

  name = "oracle"

  def __init__(self, per_step: bool = False):
    self.per_step = per_step

  def run(self, sb: Sandbox, task: Task, seed=0, on_turn=None, episode_id=None) -> Episode:
    if not task.has_solution:
      raise TaskSetupError(f"{task.id}: the task ships no reference solution")
    stage = f"/tmp/.agentrl-oracle-{uuid.uuid4().hex[:12]}"
    # Harbor uploads solution/ to /solution and solve.sh reads its files from there (`cp
    # /solution/x.py .`): staged there (by the upload, as the sandbox's root: the Dockerfile's
    # USER may not write to /) where the root is writable and /solution is free.
    writable = getattr(sb.spec, "mode", "") == "container"
    if (
      task.format == "harbor"
      and writable
      and sb.exec("[ ! -e /solution ]", timeout_s=30).exit_code == 0
    ):
      stage = "/solution"
    files = task.solution_files + (FileEntry("solve.sh", task.solution_script.encode(), 0o755),)
    put_files(sb, stage, files)
    ep = empty_episode(_episode_id(episode_id, self.name, task, seed), "script_end")
    try:
      if self.per_step:
        steps = solution_steps(task) or ["solve.sh"]
        cmds = [f"SOLUTION_DIR={stage} bash {shlex.quote(f'{stage}/{s}')}" for s in steps]
        return ScriptedAgent(cmds, name=self.name).replay(sb, task, cmds, on_turn, ep)
      cmd = f"cd {shlex.quote(task.workdir)} && SOLUTION_DIR={stage} bash {stage}/solve.sh"
      return ScriptedAgent([cmd], name=self.name).replay(sb, task, [cmd], on_turn, ep)
    finally:
      sb.exec(f"rm -rf {stage}", timeout_s=30)
