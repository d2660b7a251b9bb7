"""Turns what the grader printed into a GradeResult: pytest's JUnit report or test.sh's reward.

Failure modes: none, agent_timeout, test_timeout, parse_error, tamper, grader_blocked (the
agent's: reward 0 unless tests passed; `grader_blocked` is anything in the live sandbox that
stops the grader: a folder it cannot create, a fork bomb, a full disk; `resource_exhausted`: the
agent's processes OOM-killed their own sandbox), task_error (the
task's own set-up failed), sandbox_error, infra_error (the sandbox died, the daemon failed).
The last three are `masked`: reward None, so the trainer drops the trajectory instead of
learning 0; reports count task errors and infrastructure errors on their own.
"""

from __future__ import annotations

import base64
import dataclasses
import fnmatch
import json

from envs.grading.reports import (
  TestOutcome,
  parse_junit,
  split_witness,
  test_modules,
  witness_conflicts,
)
from envs.task import Task

FAILURE_MODES = (
  "none",
  "agent_timeout",
  "test_timeout",
  "parse_error",
  "tamper",
  "grader_blocked",
  "resource_exhausted",
  "task_error",
  "sandbox_error",
  "infra_error",
)
TASK_ERROR_MODES = frozenset({"task_error", "load_error"})  # the task's fault, never the agent's
INFRA_MODES = frozenset({"sandbox_error", "infra_error"})
MASKED_MODES = frozenset({"task_error"}) | INFRA_MODES
MAX_REPORT = 8 << 20


@dataclasses.dataclass(frozen=True)
class GradeResult:
  task_id: str
  passed: bool
  reward: float | None  # None only when masked
  failure_mode: str
  masked: bool = False
  subscores: tuple[tuple[str, float], ...] = ()
  tests: tuple[TestOutcome, ...] = ()
  exit_code: int | None = None
  suite_ran: bool = False
  flags: tuple[str, ...] = ()
  duration_s: float = 0.0
  detail: str = ""
  log: str = ""
  output: str = ""  # a capped tail of the test runner's own output (pytest's, test.sh's)

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    d["subscores"] = dict(self.subscores)
    return d


def exhausted_result(task_id: str, detail: str, duration_s: float = 0.0) -> GradeResult:
  """The agent's processes killed their own sandbox (OOM in its cgroup): a failure, reward 0.

  Never masked: anything the agent can cause is the agent's failure (issue 16, self-masking)."""
  return GradeResult(
    task_id, False, 0.0, "resource_exhausted", detail=detail[-1000:], duration_s=duration_s
  )


def masked_result(task_id: str, mode: str, detail: str, duration_s: float = 0.0) -> GradeResult:
  """A result the trainer must not learn from (infrastructure, not the agent)."""
  assert mode in MASKED_MODES, mode
  return GradeResult(task_id, False, None, mode, True, detail=detail[-4000:], duration_s=duration_s)


def _tampered(base: dict, fail_on_tamper: bool) -> bool:
  return fail_on_tamper and any(f.startswith("tamper:") for f in base["flags"])


def score_pytest(
  task: Task,
  xml: str | None,
  nonce: str,
  rc: int,
  base: dict,
  reward_kind: str,
  fail_on_tamper: bool,
  witness: str,
) -> GradeResult:
  """Passes only if the report is this run's, agrees with the witness lines (`witness`: their
  tag), covers every test file and agrees with rc.

  A skipped or xfailed test counts as failed. `base` holds task_id, exit_code, flags, log.
  A test the report passes that the witness saw raise (or never saw called) is
  `tamper:report_forged`, whatever `fail_on_tamper` says: that is proof, not a heuristic.
  """
  fail = dict(passed=False, reward=0.0, failure_mode="parse_error")
  if rc == 86:
    why = "a test-script step after pytest failed"
    return GradeResult(passed=False, reward=0.0, failure_mode="none", detail=why, **base)
  if not xml or not xml.strip():
    why = f"no test report (pytest exit {rc}): the suite did not demonstrably run"
    return GradeResult(**fail, detail=why, **base)
  try:
    seen, xml = split_witness(xml, witness)
    cases = parse_junit(xml.encode()[:MAX_REPORT], nonce)
  except ValueError as e:
    return GradeResult(**fail, detail=str(e), **base)
  if forged := witness_conflicts(cases, seen):
    why = f"the report passes {len(forged)} tests the grader saw fail or never run: {forged[:3]}"
    base = {**base, "flags": (*base["flags"], "tamper:report_forged")}
    forged_result = dict(passed=False, reward=0.0, failure_mode="tamper", suite_ran=True)
    return GradeResult(**forged_result, tests=tuple(cases), detail=why, **base)
  if not cases or rc in (3, 4, 5):
    why = f"pytest exit {rc} with {len(cases)} tests"
    return GradeResult(**fail, tests=tuple(cases), detail=why, **base)
  bad = [c for c in cases if c.outcome in ("failed", "error")]
  if (rc == 0) != (not bad):
    why = f"pytest exit code {rc} disagrees with the report ({len(bad)} failed/errored)"
    return GradeResult(**fail, tests=tuple(cases), detail=why, **base)
  missing = [m for m in test_modules(task) if not any(m in c.name for c in cases)]
  if missing:
    why = f"test files did not run: {missing}"
    return GradeResult(**fail, tests=tuple(cases), detail=why, **base)
  return _finish(task, cases, base, reward_kind, _tampered(base, fail_on_tamper))


def _finish(
  task: Task, cases: list[TestOutcome], base: dict, kind: str, tampered: bool
) -> GradeResult:
  n_pass = sum(c.outcome == "passed" for c in cases)
  frac = n_pass / len(cases)
  passed = n_pass == len(cases) and not tampered
  reward = 0.0 if tampered else (1.0 if passed else (frac if kind == "fraction" else 0.0))
  subs = [("tests_passed", frac)]
  for name, pats in task.tests.subscores:
    sel = [
      c
      for c in cases
      if any(fnmatch.fnmatch(c.name, p) or fnmatch.fnmatch(c.name.split("::")[-1], p) for p in pats)
    ]
    subs.append((name, sum(c.outcome == "passed" for c in sel) / len(sel) if sel else 0.0))
  detail = f"{n_pass}/{len(cases)} tests passed" + (
    f"; flags: {', '.join(base['flags'])}" if base["flags"] else ""
  )
  return GradeResult(
    passed=passed,
    reward=reward,
    failure_mode="tamper" if tampered else "none",
    subscores=tuple(subs),
    tests=tuple(cases),
    suite_ran=True,
    detail=detail,
    **base,
  )


def score_shell(
  report: str | None, rc: int, base: dict, reward_kind: str, fail_on_tamper: bool
) -> GradeResult:
  """A test.sh runner: reward.json ({name: number}) or reward.txt (a number) in its logs."""
  fail = dict(passed=False, reward=0.0, failure_mode="parse_error")
  raw_json, raw_txt = ((report or "").split("\n") + ["", ""])[:2]
  values: dict[str, float] = {}
  try:
    data = json.loads(base64.b64decode(raw_json))
    values = {
      str(k): float(v) for k, v in (data.items() if isinstance(data, dict) else [("reward", data)])
    }
  except (ValueError, TypeError):
    try:
      values = {"reward": float(base64.b64decode(raw_txt).decode().strip())}
    except (ValueError, UnicodeDecodeError):
      why = f"test script (exit {rc}) wrote no readable reward file"
      return GradeResult(**fail, detail=why, **base)
  reward = values.get("reward", min(values.values()) if values else 0.0)
  if not 0.0 <= reward <= 1.0:
    return GradeResult(**fail, detail=f"reward {reward} outside [0, 1]", **base)
  if reward > 0 and rc != 0:
    return GradeResult(**fail, detail=f"reward {reward} but the test script exited {rc}", **base)
  tampered = _tampered(base, fail_on_tamper)
  passed = reward >= 1.0 and not tampered
  value = 0.0 if tampered else (1.0 if passed else (reward if reward_kind == "fraction" else 0.0))
  return GradeResult(
    passed=passed,
    reward=value,
    failure_mode="tamper" if tampered else "none",
    subscores=tuple(sorted(values.items())),
    suite_ran=True,
    detail=f"reward file: {values}",
    **base,
  )
