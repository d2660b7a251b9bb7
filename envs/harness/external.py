"""External harnesses as the rollout agent: `agent.kind=external`.

`ExternalEpisodes(gateway, server, harness)(task, trajectory_id, seed) -> outcome` opens the
task's sandbox, opens a gateway episode, runs `harness(base_url, runner, instruction)` (any
program on an OpenAI client: mini-swe-agent, a plain script) with the episode's base URL and a
SandboxRunner bound to that sandbox, waits for it (with a deadline), grades the sandbox with
the verifier and returns the captured trajectory. A harness that crashes or overruns its
deadline, a sandbox failure or a masked grade is an infrastructure failure (`infra_error`
set: retried or masked by the loop, never reward 0). The harness thread of an overrun is
abandoned; its late requests get 404 (its gateway episode is closed, and each attempt has
its own).

The result is the loop's envs.episodes.Outcome (plus what the harness returned).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import threading
import time
import traceback
import uuid

from envs.agents import agent as agent_lib
from envs.episodes import Outcome
from envs.harness.runner import SandboxRunner
from envs.sandbox.base import SandboxError


@dataclasses.dataclass
class ExternalOutcome(Outcome):
  """One graded external episode: the loop's Outcome and what the harness returned."""

  harness_result: object = None


def resolve_harness(spec: str):
  """The callable a "module:function" string names (AgentConfig.harness)."""
  module, _, name = spec.partition(":")
  try:
    return getattr(importlib.import_module(module), name)
  except (ImportError, AttributeError, ValueError) as e:
    raise ValueError(f"AgentConfig.harness {spec!r}: cannot import it ({e})") from None


def _run_thread(fn, *args) -> concurrent.futures.Future:
  """fn(*args) on a daemon thread: an overrunning harness never blocks the loop."""
  fut: concurrent.futures.Future = concurrent.futures.Future()

  def run():
    try:
      fut.set_result(fn(*args))
    except BaseException as e:  # noqa: BLE001 - reported as the episode's infra error
      fut.set_exception(e)

  threading.Thread(target=run, name="external-harness", daemon=True).start()
  return fut


def _attach_commands(ep, commands) -> None:
  """The sandbox commands, in order, one per turn (the rest on the last turn): the loop's
  audits read them from the turns."""
  if not ep.turns and commands:
    ep.turns.append(agent_lib.TurnRecord("", None, None))
  n = len(ep.turns)
  for i, t in enumerate(ep.turns):
    rest = commands[i:] if i == n - 1 else commands[i : i + 1]
    if rest:
      t.command = "\n".join(rest)


class ExternalEpisodes:
  """See module docstring. `harness_timeout_s` 0: the task's agent timeout."""

  def __init__(self, gateway, server, harness, *, backend: str = "bwrap", image: str = "default",
               verifier_mode: str = "after", harness_timeout_s: float = 0.0,
               exec_timeout_s: float = 30.0):  # fmt: skip
    from envs.grading.verifier import Verifier, VerifierConfig

    self.gateway, self.server, self.harness = gateway, server, harness
    self.backend, self.image = backend, image
    self.harness_timeout_s, self.exec_timeout_s = harness_timeout_s, exec_timeout_s
    self.verifier = Verifier(VerifierConfig(mode=verifier_mode))

  def prepare(self, task):
    """The task's sandbox, created and set up (no policy involved: may be prefetched)."""
    from envs.task_env import open_task_sandbox

    return open_task_sandbox(task, self.backend, self.image)

  def _infra(self, trajectory_id: str, error: str, t0: float, episode=None) -> ExternalOutcome:
    ep = episode or agent_lib.Episode(trajectory_id, [agent_lib.Segment()], [], "infra", error)
    ep.finish_reason, ep.infra_error = "infra", error
    ep.duration_s = time.monotonic() - t0
    return ExternalOutcome(ep, infra_error=error)

  def _run_harness(self, ts, task, trajectory_id: str):
    """(episode, harness result, error) with the gateway episode always closed."""
    # A fresh key per attempt: an abandoned harness of an earlier attempt cannot reach this one.
    key = f"{trajectory_id}-{uuid.uuid4().hex[:8]}"
    self.gateway.open_episode(key)
    timeout = min(self.harness_timeout_s or task.agent_timeout_s, task.agent_timeout_s)
    runner = SandboxRunner(ts.sandbox, min(self.exec_timeout_s, timeout))
    fut = _run_thread(self.harness, self.server.base_url(key), runner, task.instruction)
    result, error, reason = None, None, "harness_exit"
    try:
      result = fut.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
      error, reason = f"harness timed out after {timeout:.0f} s", "time_budget"
    except Exception as e:  # a crashing harness is infrastructure, never reward 0
      tb = traceback.format_exception(type(e), e, e.__traceback__)
      error = f"harness crashed: {type(e).__name__}: {e}\n{''.join(tb)[-1500:]}"
    ep = self.gateway.close_episode(key).episode(reason, error)
    ep.episode_id = trajectory_id
    _attach_commands(ep, runner.commands)
    return ep, result, error

  def __call__(self, task, trajectory_id: str, seed: int, policy=None, prepared=None):
    """`prepared`: a sandbox from `prepare(task)` (or the exception it raised). `seed` and
    `policy` are the loop's; an external harness samples through the gateway's policy."""
    from envs.task_env import TaskSetupError

    del seed, policy
    t0 = time.monotonic()
    try:
      if isinstance(prepared, BaseException):
        raise prepared
      ts = prepared or self.prepare(task)
    except (SandboxError, TaskSetupError, OSError) as e:
      return self._infra(trajectory_id, f"{type(e).__name__}: {e}", t0)
    try:
      ep, result, error = self._run_harness(ts, task, trajectory_id)
      if error:
        return self._infra(trajectory_id, error, t0, ep)
      res = self.verifier.grade(ts)
    finally:
      ts.close()
    ep.duration_s = time.monotonic() - t0 - res.duration_s
    out = ExternalOutcome(
      ep, float(res.reward or 0.0), dict(res.subscores), res.failure_mode, res.duration_s,
      passed=bool(res.passed), flags=list(res.flags), harness_result=result,
    )  # fmt: skip
    if res.masked:
      out.infra_error = f"{res.failure_mode}: {res.detail[-500:]}"
    return out
