"""External harnesses as the rollout agent: `agent.kind=external`.

`HarnessAgent(gateway, server, harness)` is an agent of the one protocol (envs.agents.episode):
it opens a gateway episode, runs `harness(base_url, runner, instruction)` (any program on an
OpenAI client: mini-swe-agent, a plain script) on a thread with the episode's base URL and a
SandboxRunner bound to the sandbox, and returns the captured trajectory (`Episode.result`: what
the harness returned). The runner holds the agent's time budget (the task's agent timeout, or
`harness_timeout_s` when tighter): commands are cut at it and refused after it, and a harness
that returns after its budget ran out is graded as timed out (`agent_timeout`), like the model
loop. A harness that crashes, or has not returned GRACE_S after its budget, is an
infrastructure failure (`infra_error`: retried or masked, never reward 0); the thread of an
overrun is abandoned, and its late requests get 404 (each attempt has its own gateway episode).

`ExternalEpisodes(gateway, server, harness)(task, trajectory_id, seed) -> Outcome` is the one
runner (envs.episodes.Episodes) over a HarnessAgent.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import threading
import time
import traceback
import uuid

from envs.agents import episode as episode_lib
from envs.episodes import Episodes
from envs.harness.runner import SandboxRunner

GRACE_S = 5.0  # how long a harness may take to return once its runner refuses commands


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
    ep.turns.append(episode_lib.TurnRecord("", None, None))
  n = len(ep.turns)
  for i, t in enumerate(ep.turns):
    rest = commands[i:] if i == n - 1 else commands[i : i + 1]
    if rest:
      t.command = "\n".join(rest)


class HarnessAgent:
  """See module docstring. `harness_timeout_s` 0: the task's agent timeout."""

  name = "external"

  def __init__(self, gateway, server, harness, *, harness_timeout_s: float = 0.0,
               exec_timeout_s: float = 30.0):  # fmt: skip
    self.gateway, self.server, self.harness = gateway, server, harness
    self.harness_timeout_s, self.exec_timeout_s = harness_timeout_s, exec_timeout_s

  def run(self, sb, task, seed=0, on_turn=None, episode_id=None) -> episode_lib.Episode:
    """The captured episode; `seed` and `on_turn` are the caller's (a harness samples through
    the gateway's policy and has no turn hook)."""
    del seed, on_turn
    t0, episode_id = time.monotonic(), episode_id or f"{task.id}#external"
    # A fresh key per attempt: an abandoned harness of an earlier attempt cannot reach this one.
    key = f"{episode_id}-{uuid.uuid4().hex[:8]}"
    self.gateway.open_episode(key)
    budget = episode_lib.time_budget(task, self.harness_timeout_s)
    runner = SandboxRunner(sb, min(self.exec_timeout_s, budget), budget_s=budget)
    fut = _run_thread(self.harness, self.server.base_url(key), runner, task.instruction)
    result, error, reason = None, None, "harness_exit"
    try:
      result = fut.result(timeout=budget + GRACE_S)
    except concurrent.futures.TimeoutError:
      error, reason = f"harness timed out after {budget:.0f} s", "time_budget"
    except Exception as e:  # a crashing harness is infrastructure, never reward 0
      tb = traceback.format_exception(type(e), e, e.__traceback__)
      error = f"harness crashed: {type(e).__name__}: {e}\n{''.join(tb)[-1500:]}"
    finally:
      runner.close()  # an abandoned harness runs nothing more in this sandbox
    if error is None and runner.timed_out:
      reason = "time_budget"  # it returned, but only after its budget ran out: graded so
    ep = self.gateway.close_episode(key).episode(reason, error)
    ep.episode_id, ep.result = episode_id, result
    if error:
      ep.finish_reason, ep.infra_error = "infra", error
    _attach_commands(ep, runner.commands)
    ep.duration_s = time.monotonic() - t0
    return ep


class ExternalEpisodes(Episodes):
  """The one episode runner over a HarnessAgent (module docstring)."""

  def __init__(self, gateway, server, harness, *, harness_timeout_s: float = 0.0,
               exec_timeout_s: float = 30.0, **kw):  # fmt: skip
    agent = HarnessAgent(gateway, server, harness, harness_timeout_s=harness_timeout_s,
                         exec_timeout_s=exec_timeout_s)  # fmt: skip
    super().__init__(agent, **kw)
    self.gateway = gateway

  def __call__(self, task, trajectory_id: str, seed: int, policy=None, prepared=None, **kw):
    """`policy` is the loop's; an external harness samples through the gateway's policy."""
    del policy
    return super().__call__(task, trajectory_id, seed, prepared=prepared, **kw)
