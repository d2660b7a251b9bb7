"""The evaluation runner: every task N times, each in a fresh sandbox, graded like training.

    trials = evaluate(tasks, make_agent("oracle"), EvalConfig(trials=3, concurrency=2))
    summary = metrics.aggregate(trials)

A trial opens a fresh sandbox for the task (envs.task_env), records the milestone/constraint
checks at turn 0, lets the agent act (checks again after every turn, envs.grading.milestones), grades
the end state with the same `Verifier` as training (envs.grading.verifier) and returns a plain dict
(the rows of results.json). Agents:

  policy    the model agent loop (envs.agents.agent) over a Generator; one check per model turn
  oracle    the reference solution, one turn per `solution/steps/NN.sh` if the task has them,
            otherwise `solve.sh` as a single turn
  scripted  shell commands from a file (envs.agents.scripted formats), one per turn
  null      does nothing (it must score 0)

An infrastructure failure (sandbox died, engine error) is retried in a new sandbox; if it
persists the trial is masked (never a score of 0). Trials run on a thread pool of `concurrency`
workers; results come back in (task, trial) order whatever the interleaving.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import pathlib
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Sequence

from envs.agents.episode import OUT_CHARS, Episode
from envs.agents.scripted import NullAgent, OracleAgent, ScriptedAgent, load_commands
from envs.episodes import Episodes, Outcome, failed
from envs.grading.milestones import Monitor
from envs.grading.scoring import MASKED_MODES, GradeResult
from envs.grading.verifier import Verifier, VerifierConfig
from envs.task import Task

AGENTS = ("policy", "oracle", "null", "scripted")


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  trials: int = 1
  concurrency: int = 1
  backend: str = "bwrap"
  image: str = "default"
  seed: int = 0
  retries: int = 2  # extra attempts after an infrastructure failure
  check_timeout_s: float = 60.0  # all milestone / constraint checks of one turn
  # Tasks that allow the network (TB1, Harbor allow_internet) reach the machine's package
  # sources through the egress proxy; False: no network at all.
  package_egress: bool = True
  verifier: VerifierConfig = VerifierConfig()

  def __post_init__(self):
    for f in ("trials", "concurrency"):
      if getattr(self, f) < 1:
        raise ValueError(f"EvalConfig.{f} must be >= 1, got {getattr(self, f)}")
    if self.retries < 0:
      raise ValueError(f"EvalConfig.retries must be >= 0, got {self.retries}")


# ---------------------------------------------------------------- agents


class PolicyAgent:
  """The model agent loop (envs.agents.agent.LoopAgent) over a shared Generator-like policy."""

  name = "policy"

  def __init__(
    self, policy, tokenizer, agent_cfg=None, system_prompt: str | None = None, record: int = 0
  ):
    """record: keep the segments (tokens, mask, behaviour log-probs) of the first `record`
    finished episodes in `self.segments` (rl.runtime.mismatch scores them)."""
    from envs.agents import agent as agent_lib  # jax-backed: only to evaluate a model

    self.policy = policy
    self.record, self.segments, self._lock = record, [], threading.Lock()
    self.agent_cfg = agent_cfg or agent_lib.AgentConfig()
    # None: the protocol's own default prompt (tool_call's, or the versioned markdown-bash file)
    fmt = agent_lib.make_format(self.agent_cfg.protocol, tokenizer, system_prompt)
    self.loop = agent_lib.LoopAgent(policy, fmt, self.agent_cfg)

  @property
  def fmt(self):
    return self.loop.fmt

  def run(self, sb, task: Task, seed=0, on_turn=None, episode_id=None) -> Episode:
    ep = self.loop.run(sb, task, seed, on_turn, episode_id=episode_id)
    with self._lock:
      if self.record > 0 and ep.infra_error is None:
        self.record -= 1
        self.segments.extend(ep.segments)
    return ep


class Monitored:
  """`agent` with the evaluation's milestone/constraint checks (envs.grading.milestones):
  before it acts, after each of its turns, and at its end. One per attempt."""

  def __init__(self, agent, check_timeout_s: float):
    self.agent, self.name, self.check_timeout_s = agent, agent.name, check_timeout_s
    self.monitor: Monitor | None = None

  def run(self, sb, task: Task, seed=0, on_turn=None, episode_id=None) -> Episode:
    self.monitor = Monitor(sb, task, self.check_timeout_s)
    self.monitor.check(0)
    ep = self.agent.run(sb, task, seed, self.monitor.check, episode_id=episode_id)
    if ep.infra_error is None:
      self.monitor.check(len(ep.turns))
    return ep


def script_agent(path: str | pathlib.Path) -> ScriptedAgent:
  """A scripted agent: one command file for every task, or a folder of `<task_id>.<ext>` files."""
  p = pathlib.Path(path)
  if p.is_file():
    cmds = load_commands(p)
    return ScriptedAgent(lambda task: list(cmds), f"scripted:{p.name}")
  if not p.is_dir():
    raise FileNotFoundError(f"--script: {p} is neither a command file nor a folder")

  def commands_for(task: Task) -> list[str]:
    for ext in (".sh", ".txt", ".json", ".yaml", ".yml", ""):
      f = p / f"{task.id}{ext}"
      if f.is_file():
        return load_commands(f)
    raise FileNotFoundError(f"--script folder {p} has no command file for task {task.id!r}")

  return ScriptedAgent(commands_for, f"scripted:{p.name}")


def make_agent(kind: str, *, script: str | None = None, policy=None):
  """An agent by name; `policy` is a ready PolicyAgent for kind 'policy'."""
  if kind == "null":
    return NullAgent()
  if kind == "oracle":
    return OracleAgent(per_step=True)
  if kind == "scripted":
    if not script:
      raise ValueError("the scripted agent needs a command file or folder (--script)")
    return script_agent(script)
  if kind == "policy":
    if policy is None:
      raise ValueError("the policy agent needs a checkpoint (--checkpoint)")
    return policy
  raise ValueError(f"unknown agent {kind!r}; choose from {AGENTS}")


# ---------------------------------------------------------------- trials


def trial_seed(seed: int, task_id: str, trial: int) -> int:
  """A seed per (run seed, task, trial) that does not depend on scheduling order."""
  return zlib.crc32(f"{seed}:{task_id}:{trial}".encode()) & 0x7FFFFFFF


def failure_mode(grade: GradeResult, episode: Episode | None) -> str:
  """The verifier's failure mode, refined with why the agent stopped when the tests failed."""
  if grade.masked or grade.passed or grade.failure_mode != "none":
    return "none" if grade.passed and grade.failure_mode == "none" else grade.failure_mode
  reason = episode.finish_reason if episode else ""
  return {
    "context": "context_length_exceeded",
    "max_turns": "turn_budget",
    "token_budget": "token_budget",
    "time_budget": "agent_timeout",
  }.get(reason, "tests_failed")


def _attempt(task: Task, agent, cfg: EvalConfig, seed: int) -> tuple[Outcome, Monitor | None]:
  """One sandbox, one episode, one grade (the one runner, envs.episodes), watched."""
  watched = Monitored(agent, cfg.check_timeout_s)
  episodes = Episodes(
    watched,
    backend=cfg.backend,
    image=cfg.image,
    verifier=Verifier(cfg.verifier),
    package_egress=cfg.package_egress,
  )
  out = episodes(task, f"{task.id}#{seed}#{uuid.uuid4().hex[:8]}", seed)
  return out, watched.monitor


def run_trial(task: Task, trial: int, agent, cfg: EvalConfig) -> dict:
  """Runs (and on infrastructure failure retries) one trial; returns its record."""
  seed = trial_seed(cfg.seed, task.id, trial)
  t0 = time.monotonic()
  attempts = 0
  while True:
    attempts += 1
    out, monitor = _attempt(task, agent, cfg, seed)
    retry = out.grade.failure_mode in MASKED_MODES and out.grade.failure_mode != "task_error"
    if not retry or attempts > cfg.retries:
      break
  return _record(task, trial, agent, seed, out, monitor, attempts, time.monotonic() - t0)


def _run_trial_safe(task: Task, trial: int, agent, cfg: EvalConfig) -> dict:
  """run_trial, where anything the runner did not map (a failing check summary, a bug) is
  the trial's infrastructure error, logged with its cause: the suite goes on."""
  t0 = time.monotonic()
  try:
    return run_trial(task, trial, agent, cfg)
  except Exception as e:  # noqa: BLE001 - mapped by envs.episodes.failed
    seed = trial_seed(cfg.seed, task.id, trial)
    out = failed(task, f"{task.id}#{trial}", e, "trial", t0)
    return _record(task, trial, agent, seed, out, None, 1, time.monotonic() - t0)


def _test_row(t) -> dict:
  """A test's outcome; a failed one keeps its message (capped by the report parser)."""
  row = {"name": t.name, "outcome": t.outcome}
  return {**row, "message": t.message} if t.outcome != "passed" and t.message else row


def _record(task, trial, agent, seed, out: Outcome, monitor, attempts, wall_s) -> dict:
  grade, ep = out.grade, out.episode
  summary = monitor.summary() if monitor is not None and monitor.active and monitor.checks else None
  return {
    "task_id": task.id,
    "suite": task.suite,
    "domain": task.domain,
    "difficulty": task.difficulty,
    "format": task.format,
    "trial": trial,
    "agent": agent.name,
    "seed": seed,
    "passed": bool(grade.passed),
    "reward": grade.reward,
    "masked": grade.masked,
    "failure_mode": failure_mode(grade, ep),
    "grade_failure_mode": grade.failure_mode,
    "detail": grade.detail,
    "flags": list(grade.flags),  # tamper:* and hack flags: which paths, which checks
    "grade_log": grade.log[-OUT_CHARS:],
    "finish_reason": ep.finish_reason,
    "turns": len(ep.turns),
    "tokens": ep.generated_tokens,
    "wall_s": round(wall_s, 3),
    "agent_s": round(out.agent_s, 3),
    "grade_s": round(out.verify_s, 3),
    "attempts": attempts,
    "subscores": dict(grade.subscores),
    "tests": [_test_row(t) for t in grade.tests],
    "test_output": grade.output,
    "checks": summary,
    "turn_checks": [tc.to_dict() for tc in monitor.checks] if monitor else [],
    "trajectory": [t.to_dict() for t in ep.turns],
    "instruction": task.instruction,
  }


def evaluate(
  tasks: Sequence[Task],
  agent,
  cfg: EvalConfig = EvalConfig(),
  on_trial: Callable[[dict], None] | None = None,
) -> list[dict]:
  """Every task `cfg.trials` times on `cfg.concurrency` workers; records in (task, trial) order."""
  ids = [t.id for t in tasks]
  if len(set(ids)) != len(ids):
    raise ValueError("evaluate: duplicate task ids")
  jobs = [(i, task, k) for i, task in enumerate(tasks) for k in range(cfg.trials)]
  out: dict[tuple[int, int], dict] = {}
  with concurrent.futures.ThreadPoolExecutor(
    cfg.concurrency, thread_name_prefix="agentrl-eval"
  ) as pool:
    futs = {pool.submit(_run_trial_safe, task, k, agent, cfg): (i, k) for i, task, k in jobs}
    for fut in concurrent.futures.as_completed(futs):
      rec = fut.result()
      out[futs[fut]] = rec
      if on_trial is not None:
        on_trial(rec)
  return [out[(i, k)] for i, _, k in jobs]


# ---------------------------------------------------------------- task selection and policy


def resolve_tasks(spec: str) -> list[Task]:
  """Tasks from a comma-separated list of folders, built-in suite names, or `builtin`."""
  from envs.formats.loading import builtin_tasks, load_tasks
  from envs.task import BUILTIN_DIR

  out: list[Task] = []
  for item in [s.strip() for s in spec.split(",") if s.strip()]:
    path = pathlib.Path(item)
    if item in ("builtin", "all"):
      out += builtin_tasks()
    elif path.exists():
      out += load_tasks(path)
    elif (BUILTIN_DIR / item).is_dir():
      out += load_tasks(BUILTIN_DIR / item)
    else:
      suites = sorted(p.name for p in BUILTIN_DIR.iterdir() if p.is_dir())
      raise FileNotFoundError(
        f"--tasks: {item!r} is neither a folder nor a built-in suite ({', '.join(suites)}, builtin)"
      )
  if not out:
    raise ValueError(f"--tasks={spec!r} holds no task")
  return out


def sample_tasks(tasks: Sequence[Task], per_suite: int, seed: int = 0) -> list[Task]:
  """A seeded sample of `per_suite` tasks from each suite (all of a smaller suite), in order."""
  import random

  by_suite: dict[str, list[Task]] = {}
  for t in tasks:
    by_suite.setdefault(t.suite, []).append(t)
  keep = set()
  for suite, ts in sorted(by_suite.items()):
    rng = random.Random(f"{seed}:{suite}")
    keep |= {t.id for t in (ts if len(ts) <= per_suite else rng.sample(ts, per_suite))}
  return [t for t in tasks if t.id in keep]
