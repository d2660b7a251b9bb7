"""The command runner a harness gets: shell commands and file writes bound to one sandbox."""

from __future__ import annotations

import time

from envs.sandbox.base import ExecResult, Sandbox, SandboxError


class SandboxRunner:
  """Runs commands in `sandbox` (bash -lc in the task's workdir, no network).

  `budget_s`: the agent's time budget, from the runner's creation. A command is cut at the
  budget's end and refused after it (a timed-out result; `timed_out` is then set: the episode
  is graded as an agent timeout). After `close()` every call raises SandboxError. A
  SandboxError (the sandbox died) propagates: the harness crashes, and the episode is an
  infrastructure failure, never reward 0.
  """

  def __init__(self, sandbox: Sandbox, timeout_s: float = 30.0, budget_s: float | None = None):
    self.sandbox, self.timeout_s = sandbox, timeout_s
    self.deadline = None if budget_s is None else time.monotonic() + budget_s
    self.commands: list[str] = []
    self.timed_out = self.closed = False

  @property
  def workdir(self) -> str:
    return self.sandbox.spec.workdir

  def close(self) -> None:
    self.closed = True

  def _check_open(self) -> None:
    if self.closed:
      raise SandboxError("the harness's episode is over: its runner is closed")

  def run(self, command: str, timeout_s: float | None = None) -> ExecResult:
    self._check_open()
    self.commands.append(command)
    limit = timeout_s or self.timeout_s
    left = float("inf") if self.deadline is None else self.deadline - time.monotonic()
    if left <= 0:
      self.timed_out = True
      return ExecResult(124, "", "the agent's time budget is spent", timed_out=True)
    r = self.sandbox.exec(command, timeout_s=min(limit, left))
    self.timed_out |= r.timed_out and left <= limit
    return r

  def write_file(self, path: str, content: str | bytes) -> None:
    self._check_open()
    self.commands.append(f"write_file {path}")
    self.sandbox.write_file(path, content)
