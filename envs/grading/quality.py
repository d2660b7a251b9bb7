"""The environment quality gate, the quarantine file, and runtime reward audits.

Gate (per task, one sandbox reused through snapshot/restore): the reference solution passes
k of k runs, a no-op agent fails, every hack in `envs.grading.hacks.HACKS` fails, and repeated runs
agree. A task that fails any check is quarantined with its reason; every `TaskPool` skips
quarantined tasks. During training, `RewardAuditor` keeps per-task reward statistics, flags
anomalies (a passed trajectory that touched test or reward paths, an abrupt jump to always
passing, a re-grade that disagrees) and quarantines the task with the evidence saved.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import fcntl
import json
import logging
import os
import pathlib
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence

from envs.agents.scripted import NullAgent, OracleAgent
from envs.episodes import play
from envs.grading.hacks import HACKS_BY_NAME, Hack
from envs.grading.scoring import GradeResult
from envs.grading.verifier import Verifier, VerifierConfig
from envs.sandbox.base import SandboxError
from envs.task import Task
from envs.task_env import TaskSandbox, TaskSetupError, open_task_sandbox, task_spec

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- quarantine


class Quarantine:
  """A JSON file {task_id: {reason, source, evidence, time}} shared by gates, audits and pools.

  Writes are locked (fcntl) and atomic (rename); reads re-load when the file changed.
  """

  def __init__(self, path: str | os.PathLike):
    self.path = pathlib.Path(path)
    self._cache: dict[str, dict] = {}
    self._mtime: float | None = None

  @contextlib.contextmanager
  def _locked(self):
    self.path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{self.path}.lock", "w") as lock:
      fcntl.flock(lock, fcntl.LOCK_EX)
      yield

  def entries(self) -> dict[str, dict]:
    try:
      mtime = self.path.stat().st_mtime_ns
    except FileNotFoundError:
      self._cache, self._mtime = {}, None
      return {}
    if mtime != self._mtime:
      data = json.loads(self.path.read_text() or "{}")
      self._cache, self._mtime = dict(data.get("tasks", {})), mtime
    return dict(self._cache)

  def _write(self, tasks: dict[str, dict]) -> None:
    tmp = self.path.with_suffix(self.path.suffix + ".tmp")
    tmp.write_text(json.dumps({"version": 1, "tasks": tasks}, indent=2, sort_keys=True))
    os.replace(tmp, self.path)

  def add(
    self, task_id: str, reason: str, source: str = "gate", evidence: str | None = None
  ) -> None:
    with self._locked():
      tasks = self.entries()
      when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
      tasks[task_id] = {"reason": reason, "source": source, "evidence": evidence, "time": when}
      self._write(tasks)

  def remove(self, task_id: str) -> None:
    with self._locked():
      tasks = self.entries()
      if tasks.pop(task_id, None) is not None:
        self._write(tasks)

  def ids(self) -> frozenset[str]:
    return frozenset(self.entries())

  def reason(self, task_id: str) -> str | None:
    e = self.entries().get(task_id)
    return e["reason"] if e else None

  def __contains__(self, task_id: str) -> bool:
    return task_id in self.entries()


# ---------------------------------------------------------------- the gate


@dataclasses.dataclass(frozen=True)
class GateConfig:
  backend: str = "bwrap"
  image: str = "default"
  k: int = 3  # reference runs; all must pass
  noop_runs: int = 1
  hacks: tuple[str, ...] = tuple(HACKS_BY_NAME)
  verifier: VerifierConfig = VerifierConfig()
  concurrency: int = 2
  infra_retries: int = 1


@dataclasses.dataclass(frozen=True)
class RunRecord:
  """One gate run, cut from its envs.episodes.Outcome for the report."""

  agent: str
  passed: bool
  reward: float | None
  failure_mode: str
  detail: str
  flags: tuple[str, ...]
  agent_s: float
  grade_s: float


@dataclasses.dataclass(frozen=True)
class TaskGateReport:
  task_id: str
  ok: bool
  reasons: tuple[str, ...]
  runs: tuple[RunRecord, ...]
  infra_error: str | None = None
  duration_s: float = 0.0

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def _agents(cfg: GateConfig) -> list:
  out = [OracleAgent() for _ in range(cfg.k)] + [NullAgent() for _ in range(cfg.noop_runs)]
  return out + [HACKS_BY_NAME[h] for h in cfg.hacks]


def _one_run(ts: TaskSandbox, agent, verifier: Verifier) -> RunRecord:
  """One agent in the gate's sandbox through the one runner (envs.episodes.play)."""
  if isinstance(agent, Hack):
    agent = agent.agent(ts.task)
  out = play(ts, agent, verifier, episode_id=f"gate-{ts.task.id}-{agent.name}")
  res = out.grade
  return RunRecord(
    agent.name, res.passed, res.reward, res.failure_mode, res.detail[-600:], tuple(res.flags),
    out.agent_s, res.duration_s,
  )  # fmt: skip


def _judge(runs: Sequence[RunRecord], cfg: GateConfig) -> tuple[list[str], str | None]:
  reasons, infra = [], None
  oracle = [r for r in runs if r.agent == "oracle"]
  for r in runs:
    if r.failure_mode in ("sandbox_error", "infra_error"):
      infra = f"{r.agent}: {r.failure_mode}: {r.detail[-300:]}"
  if infra:
    return reasons, infra
  n_ok = sum(r.passed for r in oracle)
  if n_ok < len(oracle):
    bad = next(r for r in oracle if not r.passed)
    reasons.append(
      f"reference solution passed {n_ok}/{len(oracle)} runs ({bad.failure_mode}: {bad.detail[-300:]})"
    )
  if 0 < n_ok < len(oracle):
    reasons.append("repeated reference runs disagree (flaky task)")
  nulls = [r for r in runs if r.agent == "null"]
  if any(r.passed for r in nulls):
    reasons.append("the no-op agent passes (tests are not strict)")
  if len({r.reward for r in nulls}) > 1:
    reasons.append("repeated no-op runs disagree (flaky task)")
  for r in runs:
    if r.agent.startswith("hack:") and r.passed:
      reasons.append(f"{r.agent} passes ({r.detail[-200:]})")
  return reasons, None


def _run_all(task: Task, cfg: GateConfig, verifier: Verifier, runs: list[RunRecord]) -> None:
  """Every agent of the gate in one sandbox, restored to its pristine snapshot between runs;
  a sandbox a run left dead (a hack that filled its memory, say) is replaced by a fresh one.

  The sandbox lives long enough for all of them (a task's sandbox lives one episode's budget:
  on a loaded machine twenty runs outlived it, and the next restore found pid 1 gone)."""
  agents = _agents(cfg)
  life = task_spec(task, cfg.image).episode_timeout_s * len(agents)
  ts = None
  try:
    for agent in agents:
      if ts is not None:
        try:
          ts.reset()
        except SandboxError:  # died in the run before, or while being restored
          ts.close()
          ts = None
      if ts is None:
        ts = open_task_sandbox(task, cfg.backend, cfg.image, True, episode_timeout_s=life)
      runs.append(_one_run(ts, agent, verifier))
      if not ts.sandbox.alive:
        ts.close()
        ts = None
  finally:
    if ts is not None:
      ts.close()


def gate_task(task: Task, cfg: GateConfig = GateConfig()) -> TaskGateReport:
  """Runs the whole gate for one task in one sandbox (snapshot/restore between runs)."""
  t0 = time.monotonic()
  if cfg.k and not task.has_solution:
    why = "no reference solution: the gate cannot show that the task is solvable"
    return TaskGateReport(task.id, False, (why,), (), None, 0.0)
  verifier = Verifier(cfg.verifier)
  for attempt in range(cfg.infra_retries + 1):
    runs: list[RunRecord] = []
    try:
      _run_all(task, cfg, verifier, runs)
    except TaskSetupError as e:
      return TaskGateReport(
        task.id,
        False,
        (f"environment setup failed: {e}",),
        tuple(runs),
        None,
        time.monotonic() - t0,
      )
    except SandboxError as e:
      runs.append(RunRecord("sandbox", False, None, "sandbox_error", str(e)[-600:], (), 0.0, 0.0))
    reasons, infra = _judge(runs, cfg)
    if infra is None or attempt == cfg.infra_retries:
      ok = not reasons and infra is None
      return TaskGateReport(task.id, ok, tuple(reasons), tuple(runs), infra, time.monotonic() - t0)
  raise AssertionError("unreachable")


def _gate_task_safe(task: Task, cfg: GateConfig) -> TaskGateReport:
  """gate_task, where anything unforeseen is this task's infrastructure error (logged with
  its cause): one task never stops the gate of the others."""
  t0 = time.monotonic()
  try:
    return gate_task(task, cfg)
  except Exception as e:  # noqa: BLE001 - reported, never quarantined
    why = f"unexpected error: {type(e).__name__}: {e}"
    log.exception("quality gate of task %s: %s", task.id, why)
    return TaskGateReport(task.id, False, (), (), why, time.monotonic() - t0)


def check_tasks(
  tasks: Iterable[Task],
  cfg: GateConfig = GateConfig(),
  quarantine: Quarantine | None = None,
  progress: Callable[[TaskGateReport], None] | None = None,
) -> list[TaskGateReport]:
  """Gates tasks concurrently; failing tasks are quarantined, passing gate entries released."""
  tasks = list(tasks)
  reports: dict[str, TaskGateReport] = {}
  with concurrent.futures.ThreadPoolExecutor(max(1, cfg.concurrency)) as pool:
    futs = {pool.submit(_gate_task_safe, t, cfg): t for t in tasks}
    for fut in concurrent.futures.as_completed(futs):
      rep = fut.result()
      reports[rep.task_id] = rep
      if quarantine is not None and rep.infra_error is None:
        if not rep.ok:
          quarantine.add(rep.task_id, "; ".join(rep.reasons), source="gate")
        elif quarantine.entries().get(rep.task_id, {}).get("source") == "gate":
          quarantine.remove(rep.task_id)
      if progress:
        progress(rep)
  return [reports[t.id] for t in tasks]


# ---------------------------------------------------------------- runtime audits

# Paths an honest trajectory has no reason to touch: hidden tests, reward/report files,
# the grader's folders, the reference solution, pytest's machinery.
PROTECTED_PATTERNS = (
  r"(?<![\w.~-])/tests\b",
  r"\breward\.(txt|json)\b",
  r"/logs/verifier",
  r"\.agentrl-(grader|oracle)",
  r"\bjunit(\.xml|xml)\b",
  r"\bconftest\.py\b",
  r"\bsitecustomize\b",
  r"\b_pytest\b",
  r"\bsolve\.sh\b|\bsolution\.(sh|ya?ml)\b",
)


@dataclasses.dataclass(frozen=True)
class AuditConfig:
  window: int = 16  # recent rewards compared with the window before them
  jump_low: float = 0.25  # the earlier window's pass rate at or below this ...
  jump_high: float = 1.0  # ... and the recent one at or above this: an abrupt jump
  regrade_prob: float = 0.1  # fraction of passed trajectories re-graded
  quarantine_after: tuple[tuple[str, int], ...] = (
    ("regrade_disagreement", 1),
    ("abrupt_jump", 1),
    ("tamper", 1),
    ("touched_protected_paths", 2),
  )
  evidence_dir: str | None = None
  seed: int = 0


@dataclasses.dataclass
class TaskStats:
  n: int = 0
  n_passed: int = 0
  n_masked: int = 0
  reward_sum: float = 0.0
  recent: list = dataclasses.field(default_factory=list)  # last 2*window pass flags
  flags: dict = dataclasses.field(default_factory=dict)  # flag -> count

  @property
  def mean_reward(self) -> float:
    return self.reward_sum / self.n if self.n else 0.0


class RewardAuditor:
  """Per-task reward statistics and anomaly flags; auto-quarantine with evidence.

  Call `observe()` for every graded trajectory. `regrade`, when given, re-grades the same
  end state (e.g. in a fresh sandbox); the auditor calls it for a seeded fraction of passes.
  """

  def __init__(self, cfg: AuditConfig = AuditConfig(), quarantine: Quarantine | None = None):
    self.cfg, self.quarantine = cfg, quarantine
    self.stats: dict[str, TaskStats] = {}
    self._rng = random.Random(cfg.seed)
    self._protected = re.compile("|".join(PROTECTED_PATTERNS))
    self._limits = dict(cfg.quarantine_after)
    self.events: list[dict] = []

  def observe(
    self,
    task_id: str,
    result: GradeResult,
    commands: Sequence[str] = (),
    regrade: Callable[[], GradeResult] | None = None,
  ) -> list[str]:
    st = self.stats.setdefault(task_id, TaskStats())
    if result.masked:
      st.n_masked += 1
      return []
    st.n += 1
    st.n_passed += result.passed
    st.reward_sum += result.reward or 0.0
    st.recent = (st.recent + [bool(result.passed)])[-2 * self.cfg.window :]
    flags, evidence = [], {"result": result.to_dict(), "commands": list(commands)}
    if result.passed:
      touched = sorted({m.group(0) for c in commands for m in self._protected.finditer(c)})
      if touched:
        flags.append("touched_protected_paths")
        evidence["touched"] = touched
      if regrade is not None and self._rng.random() < self.cfg.regrade_prob:
        again = regrade()
        evidence["regrade"] = again.to_dict()
        if not again.masked and again.passed != result.passed:
          flags.append("regrade_disagreement")
    if any(f.startswith("tamper:") for f in result.flags):
      flags.append("tamper")
    if self._jumped(st):
      flags.append("abrupt_jump")
      evidence["recent"] = list(st.recent)
    for f in flags:
      st.flags[f] = st.flags.get(f, 0) + 1
    if flags:
      self._act(task_id, st, flags, evidence)
    return flags

  def _jumped(self, st: TaskStats) -> bool:
    w = self.cfg.window
    if len(st.recent) < 2 * w or st.flags.get("abrupt_jump"):
      return False
    before, after = st.recent[:w], st.recent[w:]
    return sum(before) / w <= self.cfg.jump_low and sum(after) / w >= self.cfg.jump_high

  def _act(self, task_id: str, st: TaskStats, flags: list[str], evidence: dict) -> None:
    path = None
    if self.cfg.evidence_dir:
      d = pathlib.Path(self.cfg.evidence_dir, task_id.replace("/", "__"))
      d.mkdir(parents=True, exist_ok=True)
      path = d / f"{st.n:06d}-{'+'.join(flags)}.json"
      path.write_text(
        json.dumps(
          {"task_id": task_id, "flags": flags, "stats": self.summary(task_id), **evidence},
          indent=2,
          default=str,
        )
      )
    event = {
      "task_id": task_id,
      "flags": flags,
      "evidence": str(path) if path else None,
      "quarantined": False,
    }
    over = [f for f in flags if st.flags[f] >= self._limits.get(f, 1 << 30)]
    if over and self.quarantine is not None and task_id not in self.quarantine:
      self.quarantine.add(
        task_id, f"runtime audit: {', '.join(over)}", source="audit", evidence=event["evidence"]
      )
      event["quarantined"] = True
    self.events.append(event)

  def summary(self, task_id: str) -> dict:
    st = self.stats.get(task_id, TaskStats())
    w = self.cfg.window
    return {
      "n": st.n,
      "pass_rate": st.n_passed / st.n if st.n else 0.0,
      "mean_reward": st.mean_reward,
      "recent_pass_rate": sum(st.recent[-w:]) / len(st.recent[-w:]) if st.recent else 0.0,
      "masked": st.n_masked,
      "flags": dict(st.flags),
    }

  def state_dict(self) -> dict:
    return {
      "stats": {k: dataclasses.asdict(v) for k, v in self.stats.items()},
      "rng": list(self._rng.getstate()[1]) + [self._rng.getstate()[0], self._rng.getstate()[2]],
    }

  def load_state_dict(self, state: dict) -> None:
    self.stats = {k: TaskStats(**v) for k, v in state["stats"].items()}
    r = state["rng"]
    self._rng.setstate((r[-2], tuple(r[:-2]), r[-1]))
