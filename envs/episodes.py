"""The one episode runner and its one result type: RL rollouts, external harnesses, the
evaluation and the quality gate all run episodes here.

`play(ts, agent, verifier, seed=..., episode_id=...) -> Outcome`: an agent of the one protocol
(envs.agents.episode) acts in a set-up task sandbox and the verifier grades the end state,
told whether the agent ran out of time. `Episodes(agent)(task, trajectory_id, seed) -> Outcome`
opens a fresh sandbox for the task first (or takes one `prepare(task)` made ahead: prefetch)
and always closes it. Each caller adds only its own: RL its retries and store rows, the
evaluation its milestone monitor and records, the gate its snapshot/reset and judgement.

Every failure is mapped once, here, to a GradeResult (`Outcome.grade`):
  set-up    TaskSetupError: task_error; SandboxError / OSError: sandbox_error (both masked)
  acting    TaskSetupError (the oracle of a task without a solution): task_error;
            SandboxExhaustedError (the agent OOM-killed its own sandbox): resource_exhausted,
            the agent's failure, reward 0, never masked; SandboxError, an episode with
            `infra_error` (engine, harness): infra_error
  anything  else raised by one trial: infra_error with its cause, logged with the traceback:
            one trajectory never aborts a run (eval suite, quality gate, RL rollouts)
A masked result sets `infra_error`: the caller retries or masks it, never reward 0.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback

from envs.agents.episode import Episode, empty_episode
from envs.grading.scoring import GradeResult, exhausted_result, masked_result
from envs.sandbox.base import SandboxError, SandboxExhaustedError

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Outcome:
  """One graded episode: what the agent did and what the verifier said."""

  episode: Episode
  reward: float = 0.0  # 0.0 when masked (`infra_error` set: never trained on)
  sub_scores: dict = dataclasses.field(default_factory=dict)
  failure_mode: str | None = None
  verify_s: float = 0.0
  infra_error: str | None = None
  passed: bool = False
  flags: list = dataclasses.field(default_factory=list)  # the verifier's (tamper, ...)
  grade: GradeResult | None = None  # the verifier's whole result, or the masked/failed one
  agent_s: float = 0.0  # the agent's wall time

  @property
  def harness_result(self):
    """What an external harness returned (envs.harness)."""
    return self.episode.result


def graded(episode: Episode, res: GradeResult, agent_s: float = 0.0) -> Outcome:
  """The Outcome of `episode` graded `res`; a masked `res` is an infrastructure failure."""
  out = Outcome(
    episode,
    float(res.reward or 0.0),
    dict(res.subscores),
    res.failure_mode,
    res.duration_s,
    passed=bool(res.passed),
    flags=list(res.flags),
    grade=res,
    agent_s=agent_s,
  )
  if res.masked:
    out.infra_error = episode.infra_error or f"{res.failure_mode}: {res.detail[-500:]}"
  return out


def failed(task, episode_id: str, e: BaseException, phase: str, t0: float, ep=None) -> Outcome:
  """The Outcome of an exception raised in `phase` ("set-up" or "acting") of one episode."""
  from envs.task_env import TaskSetupError

  why = f"{type(e).__name__}: {e}"
  if isinstance(e, TaskSetupError):
    res = masked_result(task.id, "task_error", why)
  elif isinstance(e, SandboxExhaustedError) and phase == "acting":
    res = exhausted_result(task.id, why)
  elif isinstance(e, SandboxError | OSError):
    res = masked_result(task.id, "sandbox_error" if phase == "set-up" else "infra_error", why)
  else:  # a bug or an unforeseen failure in one trial: its infra error, and the run goes on
    log.error("episode %s of task %s: %s failed: %s", episode_id, task.id, phase, why)
    log.error("%s", "".join(traceback.format_exception(type(e), e, e.__traceback__)))
    res = masked_result(task.id, "infra_error", f"unexpected error in {phase}: {why}")
  ep = ep or empty_episode(episode_id, "infra" if res.masked else res.failure_mode)
  if res.masked:
    ep.finish_reason, ep.infra_error = "infra", res.detail
  ep.duration_s = time.monotonic() - t0
  return graded(ep, res, ep.duration_s)


def play(ts, agent, verifier, *, seed: int = 0, episode_id: str = "", on_turn=None,
         policy=None) -> Outcome:  # fmt: skip
  """`agent` acts in the task sandbox `ts`, `verifier` grades it (module docstring)."""
  task, t0 = ts.task, time.monotonic()
  kw = {} if policy is None else {"policy": policy}  # a model agent's policy for this call
  try:
    ep = agent.run(ts.sandbox, task, seed, on_turn, episode_id=episode_id or None, **kw)
  except Exception as e:  # noqa: BLE001 - mapped by `failed`
    return failed(task, episode_id, e, "acting", t0)
  agent_s = time.monotonic() - t0
  if ep.infra_error:
    return graded(ep, masked_result(task.id, "infra_error", ep.infra_error), agent_s)
  try:
    res = verifier.grade(ts, agent_timed_out=ep.timed_out)
  except Exception as e:  # noqa: BLE001 - the verifier maps its own; this is a bug's backstop
    return failed(task, episode_id, e, "grading", t0, ep)
  return graded(ep, res, agent_s)


class Episodes:
  """`(task, trajectory_id, seed, policy=None, prepared=None) -> Outcome`: `agent` plays
  the task in a fresh sandbox (module docstring). `prepared`: a sandbox from `prepare(task)`,
  or the exception that raised."""

  def __init__(self, agent, *, backend: str = "bwrap", image: str = "default",
               verifier_mode: str = "after", verifier=None, **open_kw):  # fmt: skip
    """`open_kw`: more of open_task_sandbox's arguments (package_egress, ...)."""
    from envs.grading.verifier import Verifier, VerifierConfig

    self.agent, self.backend, self.image, self.open_kw = agent, backend, image, open_kw
    self.verifier = verifier or Verifier(VerifierConfig(mode=verifier_mode))

  def prepare(self, task):
    """The task's sandbox, created and set up (no policy involved: prefetched ahead)."""
    from envs.task_env import open_task_sandbox

    return open_task_sandbox(task, self.backend, self.image, **self.open_kw)

  def __call__(self, task, trajectory_id: str, seed: int, policy=None, prepared=None,
               on_turn=None, agent=None) -> Outcome:  # fmt: skip
    """`agent`: another agent for this call (the evaluation's monitored one)."""
    t0 = time.monotonic()
    try:
      if isinstance(prepared, BaseException):
        raise prepared
      ts = prepared or self.prepare(task)
    except Exception as e:  # noqa: BLE001 - mapped by `failed`
      return failed(task, trajectory_id, e, "set-up", t0)
    with ts:
      return play(ts, agent or self.agent, self.verifier, seed=seed, episode_id=trajectory_id,
                  on_turn=on_turn, policy=policy)  # fmt: skip


class SandboxEpisodes(Episodes):
  """The model agent loop's episodes: `Episodes` over a LoopAgent(policy, fmt, agent_cfg)."""

  def __init__(self, policy, fmt, agent_cfg, **kw):
    from envs.agents.agent import LoopAgent

    super().__init__(LoopAgent(policy, fmt, agent_cfg), **kw)
    self.policy, self.fmt, self.agent_cfg = policy, fmt, agent_cfg


def infra_outcome(trajectory_id: str, error: str, t0: float) -> Outcome:
  """An episode that never ran (no sandbox, no worker): an infrastructure failure."""
  ep = empty_episode(trajectory_id, "infra", error, duration_s=time.monotonic() - t0)
  return Outcome(ep, infra_error=error, failure_mode="infra_error")
