"""Grades the end state of an episode with the task's hidden tests.

The tests enter the sandbox only now (mode `after`), or the agent's workspace is carried
into a fresh copy of the task environment first (mode `fresh`). Before the tests run, every
process the agent left is killed and the grader's folders are created empty, so nothing
planted (a reward file, a report, a daemon) survives. pytest runs isolated from the agent's
environment (`env -i`, `python -I`, our own ini file, `--confcutdir`), writes JUnit XML whose
suite name is a fresh nonce, and a task passes only if that report exists, covers every test
file, and agrees with pytest's exit code. A skipped or xfailed test counts as failed.

Failure modes: none, agent_timeout, test_timeout, parse_error, tamper (these are the
agent's: reward 0 unless tests passed), setup_error, sandbox_error, infra_error (these are
not: reward None and `masked`, so the trainer drops the trajectory instead of learning 0).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import pathlib
import re
import shlex
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET

from envs.sandbox.base import Sandbox, SandboxError
from envs.task import FileEntry, Task
from envs.task_env import (
  KILL_STRAYS,
  TaskSandbox,
  TaskSetupError,
  manifest_cmd,
  neutralize_login,
  open_task_sandbox,
  put_files,
)

FAILURE_MODES = (
  "none",
  "agent_timeout",
  "test_timeout",
  "parse_error",
  "tamper",
  "setup_error",
  "sandbox_error",
  "infra_error",
)
MASKED_MODES = frozenset({"setup_error", "sandbox_error", "infra_error"})
GRADER_ROOT = "/tmp/.agentrl-grader"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_RC_MARK = "@@AGENTRL_RC="
_MAX_REPORT = 8 << 20
# New files with these names change how Python or pytest behave: planted, they are tampering.
_TAMPER_NAMES = ("conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.py", "py.py")
_TAMPER_CONTENT = re.compile(rb"_pytest|pytest_runtest|pytest_collect|junitxml|\.agentrl-grader")


@dataclasses.dataclass(frozen=True)
class VerifierConfig:
  mode: str = "after"  # "after": tests enter the same sandbox; "fresh": a fresh environment
  reward: str | None = None  # "binary" | "fraction"; None: the task's choice
  test_timeout_s: float | None = None  # None: the task's
  fail_on_tamper: bool = True
  fresh_reuse_pristine: bool = (
    True  # "fresh" restores the sandbox's pristine snapshot if it has one
  )
  max_log_chars: int = 20000


@dataclasses.dataclass(frozen=True)
class TestOutcome:
  name: str  # "<module or class>::<test>"
  outcome: str  # passed | failed | error | skipped
  message: str = ""


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

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    d["subscores"] = dict(self.subscores)
    return d


def masked_result(task_id: str, mode: str, detail: str, duration_s: float = 0.0) -> GradeResult:
  """A result the trainer must not learn from (infrastructure, not the agent)."""
  assert mode in MASKED_MODES, mode
  return GradeResult(task_id, False, None, mode, True, detail=detail[-4000:], duration_s=duration_s)


# ---------------------------------------------------------------- JUnit XML


def parse_junit(xml_bytes: bytes, nonce: str | None = None) -> list[TestOutcome]:
  """Test outcomes from a pytest JUnit report; ValueError if it is not this run's report."""
  try:
    root = ET.fromstring(xml_bytes)
  except ET.ParseError as e:
    raise ValueError(f"invalid JUnit XML: {e}") from None
  suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
  if not suites:
    raise ValueError("no <testsuite> in the report")
  if nonce is not None and any(s.get("name") != nonce for s in suites):
    raise ValueError("report was not written by this grading run (suite name != nonce)")
  out = []
  for s in suites:
    for case in s.iter("testcase"):
      name = f"{case.get('classname', '')}::{case.get('name', '')}"
      outcome, msg = "passed", ""
      for tag, label in (("skipped", "skipped"), ("failure", "failed"), ("error", "error")):
        el = case.find(tag)
        if el is not None:
          outcome, msg = label, (el.get("message") or el.text or "")[:500]
      out.append(TestOutcome(name, outcome, msg))
  return out


def _test_modules(task: Task) -> list[str]:
  mods = []
  for f in task.tests.files:
    p = pathlib.PurePosixPath(f.path)
    if p.suffix == ".py" and (p.name.startswith("test_") or p.stem.endswith("_test")):
      mods.append(p.stem)
  return mods


# ---------------------------------------------------------------- tamper scan


def tamper_flags(
  baseline: dict[str, str], now: dict[str, str], contents: dict[str, bytes]
) -> list[str]:
  """Flags for created or changed workspace files that can subvert the test run."""
  import sys

  stdlib = getattr(sys, "stdlib_module_names", frozenset())
  flags = []
  for path, digest in sorted(now.items()):
    if baseline.get(path) == digest:
      continue
    p = pathlib.PurePosixPath(path)
    if (
      p.name in _TAMPER_NAMES
      or p.suffix == ".pth"
      or "_pytest" in p.parts
      or "pytest" in p.parts[:-1]
    ):
      flags.append(f"tamper:planted:{path}")
    elif len(p.parts) == 1 and p.suffix == ".py" and p.stem in stdlib:
      flags.append(f"tamper:shadows_stdlib:{path}")
    elif path in contents and _TAMPER_CONTENT.search(contents[path]):
      flags.append(f"tamper:test_machinery_in:{path}")
  return flags


def _changed_py(baseline: dict[str, str], now: dict[str, str]) -> list[str]:
  return [
    p
    for p, d in now.items()
    if baseline.get(p) != d and p.endswith((".py", ".sh", ".pth", ".cfg", ".ini"))
  ]


# ---------------------------------------------------------------- grading


class Verifier:
  """Grades TaskSandboxes; thread-safe (no mutable state)."""

  def __init__(self, cfg: VerifierConfig = VerifierConfig()):
    if cfg.mode not in ("after", "fresh"):
      raise ValueError(f"VerifierConfig.mode must be 'after' or 'fresh', got {cfg.mode!r}")
    self.cfg = cfg

  def grade(self, ts: TaskSandbox, agent_timed_out: bool = False) -> GradeResult:
    t0 = time.monotonic()
    task = ts.task
    mode = task.tests.grade_mode or self.cfg.mode
    fresh: TaskSandbox | None = None
    try:
      box = ts.sandbox
      if mode == "fresh":
        box, fresh = self._fresh_box(ts)
      res = self._grade_in(box, task, ts.baseline)
    except TaskSetupError as e:
      return masked_result(task.id, "setup_error", str(e), time.monotonic() - t0)
    except SandboxError as e:
      return masked_result(
        task.id, "sandbox_error", f"{type(e).__name__}: {e}", time.monotonic() - t0
      )
    except Exception as e:  # daemon/API/OS failures are infrastructure, never reward 0
      return masked_result(
        task.id, "infra_error", f"{type(e).__name__}: {e}", time.monotonic() - t0
      )
    finally:
      if fresh is not None and fresh is not ts:
        fresh.close()
    if agent_timed_out and res.failure_mode == "none":
      res = dataclasses.replace(res, failure_mode="agent_timeout")
    return dataclasses.replace(res, duration_s=time.monotonic() - t0)

  def _fresh_box(self, ts: TaskSandbox) -> tuple[Sandbox, TaskSandbox | None]:
    """The agent's workspace inside a fresh copy of the task environment."""
    task, wd = ts.task, shlex.quote(ts.task.workdir)
    ts.sandbox.exec(KILL_STRAYS, timeout_s=30)
    with tempfile.TemporaryDirectory(prefix="agentrl-fresh-") as tmp:
      ts.sandbox.download(task.workdir, f"{tmp}/ws")
      if self.cfg.fresh_reuse_pristine and ts.pristine is not None:
        box, owner = ts.sandbox, ts
        box.restore(ts.pristine)
      else:
        owner = open_task_sandbox(task, ts.backend)
        box = owner.sandbox
      box.exec(f"find {wd} -mindepth 1 -delete", timeout_s=60)
      box.upload(f"{tmp}/ws", task.workdir)
    return box, owner

  def _grade_in(self, sb: Sandbox, task: Task, baseline: dict[str, str]) -> GradeResult:
    nonce = uuid.uuid4().hex
    gdir = f"{GRADER_ROOT}-{nonce[:12]}"
    tdir, ldir = f"{gdir}/tests", f"{gdir}/logs"
    flags = self._prepare(sb, task, baseline, gdir, nonce)
    files = tuple(
      FileEntry(f"tests/{f.path}", f.data, f.mode) for f in self._test_files(task, tdir, ldir)
    )
    ini = FileEntry("pytest.ini", f"[pytest]\npythonpath = {task.workdir}\n".encode())
    try:
      put_files(sb, gdir, files + ((ini,) if task.tests.runner == "pytest" else ()))
    except OSError as e:  # the sandbox is up but refuses the files: the agent filled /tmp
      why = f"could not copy the tests into the sandbox: {e}"
      return GradeResult(task.id, False, 0.0, "parse_error", flags=tuple(flags), detail=why[-1000:])
    timeout = self.cfg.test_timeout_s or task.test_timeout_s
    r = sb.exec(self._command(task, gdir, nonce, timeout), timeout_s=timeout + 30)
    m = re.search(re.escape(_RC_MARK) + r"(\d+)@@" + nonce, r.stdout)
    rc = int(m.group(1)) if m else None
    log = (r.stdout + "\n--- stderr ---\n" + r.stderr)[-self.cfg.max_log_chars :]
    base = dict(task_id=task.id, exit_code=rc, flags=tuple(flags), log=log)
    if r.timed_out or rc in (124, 137):
      return GradeResult(
        passed=False,
        reward=0.0,
        failure_mode="test_timeout",
        detail=f"tests exceeded {timeout:.0f}s",
        **base,
      )
    if rc is None:
      return GradeResult(
        passed=False,
        reward=0.0,
        failure_mode="parse_error",
        detail="the test command did not finish",
        **base,
      )
    if task.tests.runner == "shell":
      return self._score_shell(sb, task, ldir, rc, base)
    return self._score_pytest(sb, task, f"{ldir}/junit.xml", nonce, rc, base)

  def _prepare(
    self, sb: Sandbox, task: Task, baseline: dict[str, str], gdir: str, nonce: str
  ) -> list[str]:
    """Kills the agent's processes, empties the grader folders, scans for tampering."""
    neutralize_login(sb)
    cmd = (
      f"{KILL_STRAYS}\nrm -rf {GRADER_ROOT}-* && mkdir -p {gdir}/tests {gdir}/logs {gdir}/home "
      f"&& echo ready-{nonce} && {manifest_cmd(task.workdir)}"
    )
    r = sb.exec(cmd, timeout_s=60)
    lines = r.stdout.strip().splitlines()
    if f"ready-{nonce}" not in lines[:-1]:
      if r.exit_code != 0 and not r.stdout:
        raise SandboxError(f"grader preparation failed (exit {r.exit_code}): {r.stderr[-1000:]}")
      return ["tamper:grader_command_blocked"]
    now = json.loads(lines[-1])
    contents = {}
    for p in _changed_py(baseline, now)[:200]:
      try:
        contents[p] = sb.read_file(f"{task.workdir}/{p}")[:_MAX_REPORT]
      except (SandboxError, OSError):
        pass
    return tamper_flags(baseline, now, contents)

  def _test_files(self, task: Task, tdir: str, ldir: str) -> tuple[FileEntry, ...]:
    if not task.tests.rewrite_paths:
      return task.tests.files
    out = []
    for f in task.tests.files:
      try:
        text = f.data.decode()
      except UnicodeDecodeError:
        out.append(f)
        continue
      text = re.sub(r"(?<![\w./-])/logs/verifier\b", ldir, text)
      text = re.sub(r"(?<![\w./-])/logs\b(?!/agent)", ldir, text)
      text = re.sub(r"(?<![\w./-])/tests\b", tdir, text)
      out.append(FileEntry(f.path, text.encode(), f.mode))
    return tuple(out)

  def _command(self, task: Task, gdir: str, nonce: str, timeout: float) -> str:
    tdir, ldir = f"{gdir}/tests", f"{gdir}/logs"
    env = {
      "PATH": SYSTEM_PATH,
      "HOME": f"{gdir}/home",
      "LANG": "C.UTF-8",
      "LC_ALL": "C.UTF-8",
      "TEST_DIR": tdir,
      "LOGS_DIR": ldir,
      "AGENTRL_WORKSPACE": task.workdir,
      "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
      "PYTHONDONTWRITEBYTECODE": "1",
      **dict(task.env),
      **dict(task.tests.env),
    }
    env_s = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    if task.tests.runner == "shell":
      run = f"/bin/bash {tdir}/test.sh > {ldir}/test-output.txt 2>&1"
    else:
      run = (
        f"/usr/bin/python3 -I -m pytest -c {gdir}/pytest.ini --rootdir={tdir} --confcutdir={tdir} "
        f"-p no:cacheprovider -p no:doctest -p no:nose -p no:pastebin -p no:stepwise -o junit_suite_name={nonce} --junitxml={ldir}/junit.xml -q -rA {tdir}"
      )
    # Absolute paths: a task's own PATH (e.g. /app/bin first) must not pick the grader's tools.
    # Strays are killed again after the tests so nothing they started rewrites the report.
    return (
      f"{KILL_STRAYS}\ncd {shlex.quote(task.workdir)} || exit 90\n"
      f"/usr/bin/env -i {env_s} /usr/bin/timeout -k 5 {int(timeout)} {run}\n__rc=$?\n{KILL_STRAYS}\n"
      f'echo "{_RC_MARK}${{__rc}}@@{nonce}"'
    )

  def _score_pytest(
    self, sb: Sandbox, task: Task, report: str, nonce: str, rc: int, base: dict
  ) -> GradeResult:
    fail = dict(passed=False, reward=0.0, failure_mode="parse_error")
    try:
      xml = sb.read_file(report)
    except (SandboxError, OSError, FileNotFoundError):
      return GradeResult(
        **fail,
        detail=f"no test report (pytest exit {rc}): the suite did not demonstrably run",
        **base,
      )
    try:
      cases = parse_junit(xml[:_MAX_REPORT], nonce)
    except ValueError as e:
      return GradeResult(**fail, detail=str(e), **base)
    if not cases or rc in (3, 4, 5):
      return GradeResult(
        **fail, tests=tuple(cases), detail=f"pytest exit {rc} with {len(cases)} tests", **base
      )
    bad = [c for c in cases if c.outcome in ("failed", "error")]
    if (rc == 0) != (not bad):
      why = f"pytest exit code {rc} disagrees with the report ({len(bad)} failed/errored)"
      return GradeResult(**fail, tests=tuple(cases), detail=why, **base)
    missing = [m for m in _test_modules(task) if not any(m in c.name for c in cases)]
    if missing:
      return GradeResult(
        **fail, tests=tuple(cases), detail=f"test files did not run: {missing}", **base
      )
    return self._finish(task, cases, rc, base)

  def _finish(self, task: Task, cases: list[TestOutcome], rc: int, base: dict) -> GradeResult:
    n_pass = sum(c.outcome == "passed" for c in cases)
    frac = n_pass / len(cases)
    tampered = self.cfg.fail_on_tamper and any(f.startswith("tamper:") for f in base["flags"])
    passed = n_pass == len(cases) and not tampered
    kind = self.cfg.reward or task.tests.reward
    reward = 0.0 if tampered else (1.0 if passed else (frac if kind == "fraction" else 0.0))
    subs = [("tests_passed", frac)]
    for name, pats in task.tests.subscores:
      sel = [
        c
        for c in cases
        if any(
          fnmatch.fnmatch(c.name, p) or fnmatch.fnmatch(c.name.split("::")[-1], p) for p in pats
        )
      ]
      subs.append((name, sum(c.outcome == "passed" for c in sel) / len(sel) if sel else 0.0))
    mode = "tamper" if tampered else "none"
    detail = f"{n_pass}/{len(cases)} tests passed" + (
      f"; flags: {', '.join(base['flags'])}" if base["flags"] else ""
    )
    return GradeResult(
      passed=passed,
      reward=reward,
      failure_mode=mode,
      subscores=tuple(subs),
      tests=tuple(cases),
      suite_ran=True,
      detail=detail,
      **base,
    )

  def _score_shell(self, sb: Sandbox, task: Task, ldir: str, rc: int, base: dict) -> GradeResult:
    """A test.sh runner: reward.txt (a number) or reward.json ({name: number}) in the log folder."""
    fail = dict(passed=False, reward=0.0, failure_mode="parse_error")
    values: dict[str, float] = {}
    try:
      raw = sb.read_file(f"{ldir}/reward.json")
      data = json.loads(raw[:_MAX_REPORT])
      values = {
        str(k): float(v)
        for k, v in (data.items() if isinstance(data, dict) else [("reward", data)])
      }
    except (SandboxError, OSError, FileNotFoundError, ValueError, TypeError):
      try:
        values = {"reward": float(sb.read_file(f"{ldir}/reward.txt").decode().strip())}
      except (SandboxError, OSError, FileNotFoundError, ValueError, UnicodeDecodeError):
        return GradeResult(
          **fail, detail=f"test script (exit {rc}) wrote no readable reward file", **base
        )
    reward = values.get("reward", min(values.values()) if values else 0.0)
    if not 0.0 <= reward <= 1.0:
      return GradeResult(**fail, detail=f"reward {reward} outside [0, 1]", **base)
    if reward > 0 and rc != 0:
      return GradeResult(**fail, detail=f"reward {reward} but the test script exited {rc}", **base)
    tampered = self.cfg.fail_on_tamper and any(f.startswith("tamper:") for f in base["flags"])
    passed = reward >= 1.0 and not tampered
    kind = self.cfg.reward or task.tests.reward
    value = 0.0 if tampered else (1.0 if passed else (reward if kind == "fraction" else 0.0))
    return GradeResult(
      passed=passed,
      reward=value,
      failure_mode="tamper" if tampered else "none",
      subscores=tuple(sorted(values.items())),
      suite_ran=True,
      detail=f"reward file: {values}",
      **base,
    )


def grade(
  ts: TaskSandbox, cfg: VerifierConfig = VerifierConfig(), agent_timed_out: bool = False
) -> GradeResult:
  return Verifier(cfg).grade(ts, agent_timed_out)


def check_milestones(sb: Sandbox, task: Task, timeout_s: float = 30.0) -> dict[str, bool]:
  """Which of the task's milestones hold now (each check runs in the workspace)."""
  out = {}
  for m in task.milestones:
    r = sb.exec(f"cd {shlex.quote(task.workdir)} && ( {m.check} )", timeout_s=timeout_s)
    out[m.name] = r.exit_code == 0 and not r.timed_out
  return out
