"""One episode end to end in a fresh task sandbox, and its one outcome type.

`SandboxEpisodes(policy, fmt, agent_cfg)(task, trajectory_id, seed) -> Outcome`: the task's
sandbox (envs.task_env), the agent loop (envs.agents.agent), the verifier (envs.grading.verifier); the
sandbox is always closed. Sandbox/engine failures and masked grades come back as
`infra_error` (retried or masked by the caller, never reward 0). The RL rollouts, the
warm start's demonstrations and the training-time eval all run episodes through it.
"""

from __future__ import annotations

import dataclasses
import time

from envs.agents import agent as agent_lib
from envs.sandbox.base import SandboxError


@dataclasses.dataclass
class Outcome:
  """One graded episode."""

  episode: agent_lib.Episode
  reward: float = 0.0
  sub_scores: dict = dataclasses.field(default_factory=dict)
  failure_mode: str | None = None
  verify_s: float = 0.0
  infra_error: str | None = None
  passed: bool = False
  flags: list = dataclasses.field(default_factory=list)  # the verifier's (tamper, ...)


class SandboxEpisodes:
  """`run_episode(task, trajectory_id, seed, policy=None) -> Outcome` (module docstring)."""

  def __init__(
    self,
    policy,
    fmt,
    agent_cfg,
    *,
    backend: str = "bwrap",
    image: str = "default",
    verifier_mode: str = "after",
  ):
    from envs.grading.verifier import Verifier, VerifierConfig

    self.policy, self.fmt, self.agent_cfg = policy, fmt, agent_cfg
    self.backend, self.image = backend, image
    self.verifier = Verifier(VerifierConfig(mode=verifier_mode))

  def prepare(self, task):
    """The task's sandbox, created and set up (no policy involved: prefetched ahead)."""
    from envs.task_env import open_task_sandbox

    return open_task_sandbox(task, self.backend, self.image)

  def __call__(self, task, trajectory_id: str, seed: int, policy=None, prepared=None) -> Outcome:
    """`prepared`: a sandbox from `prepare(task)` (or the exception it raised) to use."""
    from envs.task_env import TaskSetupError

    t0 = time.monotonic()
    cfg = dataclasses.replace(
      self.agent_cfg, episode_timeout_s=min(self.agent_cfg.episode_timeout_s, task.agent_timeout_s)
    )
    try:
      if isinstance(prepared, BaseException):
        raise prepared
      ts = prepared or self.prepare(task)
    except (SandboxError, TaskSetupError, OSError) as e:
      return infra_outcome(trajectory_id, f"{type(e).__name__}: {e}", t0)
    try:
      ep = agent_lib.run_episode(
        policy or self.policy,
        self.fmt,
        ts.sandbox,
        task.instruction,
        cfg,
        episode_id=trajectory_id,
        seed=seed,
      )
      if ep.infra_error:
        return Outcome(ep, infra_error=ep.infra_error)
      res = self.verifier.grade(ts, agent_timed_out=ep.finish_reason == "time_budget")
    finally:
      ts.close()
    out = Outcome(
      ep,
      float(res.reward or 0.0),
      dict(res.subscores),
      res.failure_mode,
      res.duration_s,
      passed=bool(res.passed),
      flags=list(res.flags),
    )
    if res.masked:
      out.infra_error = f"{res.failure_mode}: {res.detail[-500:]}"
    return out


def infra_outcome(trajectory_id: str, error: str, t0: float) -> Outcome:
  """An episode that never ran (no sandbox, no worker): an infrastructure failure."""
  ep = agent_lib.Episode(
    trajectory_id, [agent_lib.Segment()], [], "infra", error, duration_s=time.monotonic() - t0
  )
  return Outcome(ep, infra_error=error)
