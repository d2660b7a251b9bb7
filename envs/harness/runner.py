"""The command runner a harness gets: shell commands and file writes bound to one sandbox."""

from __future__ import annotations

from envs.sandbox.base import ExecResult, Sandbox


class SandboxRunner:
  """Runs commands in `sandbox` (bash -lc in the task's workdir, no network).

  A SandboxError (the sandbox died) propagates: the harness crashes, and the episode is an
  infrastructure failure, never reward 0.
  """

  def __init__(self, sandbox: Sandbox, timeout_s: float = 30.0):
    self.sandbox, self.timeout_s = sandbox, timeout_s
    self.commands: list[str] = []

  @property
  def workdir(self) -> str:
    return self.sandbox.spec.workdir

  def run(self, command: str, timeout_s: float | None = None) -> ExecResult:
    self.commands.append(command)
    return self.sandbox.exec(command, timeout_s=timeout_s or self.timeout_s)

  def write_file(self, path: str, content: str | bytes) -> None:
    self.commands.append(f"write_file {path}")
    self.sandbox.write_file(path, content)
