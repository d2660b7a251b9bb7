"""Grades the end state of an episode with the task's hidden tests.

The tests enter the sandbox only now (mode `after`), or the agent's workspace is carried
into a fresh copy of the task environment first (mode `fresh`). Before the tests are
uploaded, every process the agent left is killed and the grader's folders are created under a
fresh unguessable name; the uploaded files are checked against their sha256 right before
they run. pytest runs isolated from the agent's environment: `env -i`, `python -I` (no
PYTHON* variables, no user site, no script or working folder on sys.path), the workspace
*appended* to sys.path (the standard library and pytest come first, so a workspace `json.py`
or `sqlite3/` cannot shadow them), a fresh `sys.pycache_prefix` with bytecode writing off
(a `__pycache__/*.pyc` the agent planted beside a source file is never read), our own ini
file and `--confcutdir`. The JUnit report leaves the test process through the exec's own
stdout pipe, read on the host, before the process ends with `os._exit` (no atexit hook of
the agent's code runs); anything else written to that pipe makes the report invalid. A task
passes only if the report is this run's, covers every test file and agrees with pytest's
exit code. A skipped or xfailed test counts as failed.

Failure modes: none, agent_timeout, test_timeout, parse_error, tamper, grader_blocked (the
agent's: reward 0 unless tests passed; `grader_blocked` is anything in the live sandbox that
stops the grader: a folder it cannot create, a fork bomb, a full disk), task_error (the
task's own set-up failed), sandbox_error, infra_error (the sandbox died, the daemon failed).
The last three are `masked`: reward None, so the trainer drops the trajectory instead of
learning 0; reports count task errors and infrastructure errors on their own.
"""

from __future__ import annotations

import base64
import dataclasses
import fnmatch
import hashlib
import json
import re
import shlex
import tempfile
import time
import uuid

from envs.grading import (
  TestOutcome,
  changed_sources,
  parse_junit,
  tamper_flags,
  test_modules,
)
from envs.sandbox.base import Sandbox, SandboxError
from envs.task import FileEntry, Task
from envs.task_env import (
  KILL_STRAYS,
  TaskSandbox,
  TaskSetupError,
  kill_strays,
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
  "grader_blocked",
  "task_error",
  "sandbox_error",
  "infra_error",
)
TASK_ERROR_MODES = frozenset({"task_error", "load_error"})  # the task's fault, never the agent's
INFRA_MODES = frozenset({"sandbox_error", "infra_error"})
MASKED_MODES = frozenset({"task_error"}) | INFRA_MODES
GRADER_ROOT = "/tmp/.agentrl-grader"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_RC_MARK = "@@AGENTRL_RC="
_BEGIN, _END = "@@AGENTRL_REPORT_BEGIN@@", "@@AGENTRL_REPORT_END@@"
_CHANGED = "@@AGENTRL_TESTS_CHANGED@@"
# Runs pytest; the report goes to fd 3 (the exec's stdout) and the process ends with os._exit.
_BOOT_PY = r"""
import os, sys
sys.dont_write_bytecode = True
sys.pycache_prefix = os.environ["AGENTRL_PYCACHE"]
sys.path.append(os.environ["AGENTRL_WORKSPACE"])
import pytest
rc = pytest.main(sys.argv[1:])
try:
  with open(os.environ["AGENTRL_JUNIT"], "rb") as f:
    data = memoryview(f.read())
except OSError:
  data = memoryview(b"")
while data:
  data = data[os.write(3, data):]
os.close(3)
sys.stdout.flush(); sys.stderr.flush()
os._exit(int(rc))
"""
_MAX_REPORT = 8 << 20


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


# ---------------------------------------------------------------- grading


def _alive(sb: Sandbox) -> bool:
  try:
    return bool(sb.alive)
  except Exception:  # noqa: BLE001 - a backend that cannot tell is not alive
    return False


def _between(text: str, start: str, end: str) -> str | None:
  i = text.find(start)
  j = text.find(end, i + len(start)) if i >= 0 else -1
  return text[i + len(start) : j] if i >= 0 and j >= 0 else None


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
    box = ts.sandbox
    try:
      if mode == "fresh":
        box, fresh = self._fresh_box(ts)
      res = self._grade_in(box, task, ts.baseline)
    except TaskSetupError as e:
      return masked_result(task.id, "task_error", str(e), time.monotonic() - t0)
    except (SandboxError, OSError) as e:
      why = f"{type(e).__name__}: {e}"
      if mode == "after" and _alive(box):
        # The sandbox is up but the grader's commands fail in it (a fork bomb, a full disk,
        # a folder it cannot write): the agent caused that, so it is the agent's failure.
        res = GradeResult(task.id, False, 0.0, "grader_blocked", detail=why[-1000:])
      else:
        return masked_result(task.id, "sandbox_error", why, time.monotonic() - t0)
    except Exception as e:  # daemon/API failures are infrastructure, never reward 0
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
    kill_strays(ts.sandbox)
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
    gdir = f"{GRADER_ROOT}-{nonce}"
    tdir, ldir = f"{gdir}/tests", f"{gdir}/logs"
    flags = self._prepare(sb, task, baseline, gdir, nonce)
    if flags is None:
      why = "the grader could not prepare its folders in the live sandbox"
      return GradeResult(task.id, False, 0.0, "grader_blocked", detail=why)
    files = tuple(
      FileEntry(f"tests/{f.path}", f.data, f.mode) for f in self._test_files(task, tdir, ldir)
    )
    files += self._runner_files(task, gdir)
    try:
      put_files(sb, gdir, files)
    except OSError as e:  # the sandbox is up but refuses the files: the agent filled /tmp
      why = f"could not copy the tests into the sandbox: {e}"
      return GradeResult(
        task.id, False, 0.0, "grader_blocked", flags=tuple(flags), detail=why[-1000:]
      )
    timeout = self.cfg.test_timeout_s or task.test_timeout_s
    r = sb.exec(self._command(task, gdir, nonce, timeout, files), timeout_s=timeout + 60)
    m = re.search(re.escape(_RC_MARK) + r"(\d+)@@" + nonce, r.stdout)
    rc = int(m.group(1)) if m else None
    report = _between(r.stdout, f"{_BEGIN}{nonce}\n", f"\n{_END}{nonce}")
    stdout = r.stdout if report is None else r.stdout.replace(report, "[report]")
    log = (stdout + "\n--- stderr ---\n" + r.stderr)[-self.cfg.max_log_chars :]
    base = dict(task_id=task.id, exit_code=rc, flags=tuple(flags), log=log)
    if f"{_CHANGED}{nonce}" in r.stdout:
      why = "the hidden tests changed between upload and run (a process outlived the cleanup)"
      flags.append("tamper:tests_modified")
      base["flags"] = tuple(flags)
      return GradeResult(passed=False, reward=0.0, failure_mode="tamper", detail=why, **base)
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
      return self._score_shell(task, report, rc, base)
    if r.truncated:
      report = None
    return self._score_pytest(task, report, nonce, rc, base)

  def _prepare(
    self, sb: Sandbox, task: Task, baseline: dict[str, str], gdir: str, nonce: str
  ) -> list[str] | None:
    """Kills the agent's processes, makes the grader folders, scans for tampering.

    None: the grader could not make its folders (the agent's doing, in a live sandbox).
    """
    neutralize_login(sb)
    kill_strays(sb, backstop=False)  # the script below runs KILL_STRAYS as the backstop
    cmd = (
      f"{KILL_STRAYS}\nrm -rf {GRADER_ROOT}-* 2>/dev/null; umask 077; "
      f"mkdir {gdir} && mkdir {gdir}/tests {gdir}/logs {gdir}/home {gdir}/pycache "
      f"&& echo ready-{nonce}; {manifest_cmd(task.workdir)}"
    )
    r = sb.exec(cmd, timeout_s=60)
    lines = r.stdout.strip().splitlines()
    if f"ready-{nonce}" not in lines[:-1]:
      if not _alive(sb):
        raise SandboxError(f"grader preparation failed (exit {r.exit_code}): {r.stderr[-1000:]}")
      return None
    try:
      now = json.loads(lines[-1])
    except json.JSONDecodeError:
      return ["tamper:workspace_unreadable"]
    contents = {}
    for p in changed_sources(baseline, now)[:200]:
      try:
        contents[p] = sb.read_file(f"{task.workdir}/{p}")[:_MAX_REPORT]
      except (SandboxError, OSError):
        pass
    return tamper_flags(baseline, now, contents, cwd_on_path=task.tests.runner == "shell")

  def _rewrite(self, text: str, tdir: str, ldir: str) -> str:
    text = re.sub(r"(?<![\w./-])/logs/verifier\b", ldir, text)
    text = re.sub(r"(?<![\w./-])/logs\b(?!/agent)", ldir, text)
    return re.sub(r"(?<![\w./-])/tests\b", tdir, text)

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
      out.append(FileEntry(f.path, self._rewrite(text, tdir, ldir).encode(), f.mode))
    return tuple(out)

  def _runner_files(self, task: Task, gdir: str) -> tuple[FileEntry, ...]:
    """The pytest runner: ini file, boot script and run.sh (pre steps, pytest, post steps)."""
    if task.tests.runner != "pytest":
      return ()
    tdir, ldir = f"{gdir}/tests", f"{gdir}/logs"
    pre, post = task.tests.pre_script, task.tests.post_script
    if task.tests.rewrite_paths:
      pre, post = self._rewrite(pre, tdir, ldir), self._rewrite(post, tdir, ldir)
    pytest = (
      f"/usr/bin/python3 -I {gdir}/boot.py -c {gdir}/pytest.ini --rootdir={tdir} "
      f"--confcutdir={tdir} -p no:cacheprovider -p no:doctest -p no:nose -p no:pastebin "
      f"-p no:stepwise -o junit_suite_name=$AGENTRL_NONCE --junitxml={ldir}/junit.xml -q -rA {tdir}"
    )
    run = (
      f"cd {shlex.quote(task.workdir)} || exit 90\n{pre}\n{pytest}\n__rc=$?\n"
      f"cd {shlex.quote(task.workdir)} || exit 90\n"
      f'[ "$__rc" = 0 ] || exit "$__rc"\n( {post}\n:\n) || exit 86\nexit 0\n'
      if post.strip()
      else f"cd {shlex.quote(task.workdir)} || exit 90\n{pre}\n{pytest}\n"
    )
    return (
      FileEntry("pytest.ini", b"[pytest]\n"),
      FileEntry("boot.py", _BOOT_PY.encode()),
      FileEntry("run.sh", run.encode(), 0o755),
    )

  def _command(
    self, task: Task, gdir: str, nonce: str, timeout: float, files: tuple[FileEntry, ...]
  ) -> str:
    tdir, ldir = f"{gdir}/tests", f"{gdir}/logs"
    env = {
      "PATH": SYSTEM_PATH,
      "HOME": f"{gdir}/home",
      "LANG": "C.UTF-8",
      "LC_ALL": "C.UTF-8",
      "TEST_DIR": tdir,
      "LOGS_DIR": ldir,
      "AGENTRL_WORKSPACE": task.workdir,
      "AGENTRL_PYCACHE": f"{gdir}/pycache",
      "AGENTRL_JUNIT": f"{ldir}/junit.xml",
      "AGENTRL_NONCE": nonce,
      "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
      "PYTHONDONTWRITEBYTECODE": "1",
      **dict(task.env),
      **dict(task.tests.env),
    }
    env_s = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    sums = "".join(f"{hashlib.sha256(f.data).hexdigest()}  {gdir}/{f.path}\n" for f in files)
    check = (
      f"/usr/bin/sha256sum --quiet --strict -c - >/dev/null 2>&1 <<'__AGENTRL_SUMS__' || "
      f'{{ echo "{_CHANGED}{nonce}"; exit 0; }}\n{sums}__AGENTRL_SUMS__\n'
    )
    if task.tests.runner == "shell":
      run = f"/bin/bash {tdir}/test.sh > {ldir}/test-output.txt 2>&1"
      # The reward files are read right here, after the strays are killed, not by a later call.
      tail = (
        f'echo "{_BEGIN}{nonce}"; for __f in reward.json reward.txt; do /usr/bin/head -c 65536 '
        f"{ldir}/$__f 2>/dev/null | /usr/bin/base64 -w0; echo; done; "
        f'echo "{_END}{nonce}"\n'
      )
      head = ""
    else:
      run = f"/bin/bash {gdir}/run.sh 3>&1 > {ldir}/test-output.txt 2>&1"
      head, tail = f'echo "{_BEGIN}{nonce}"\n', f'echo; echo "{_END}{nonce}"\n'
    # Absolute paths: a task's own PATH (e.g. /app/bin first) must not pick the grader's tools.
    # Strays are killed again after the tests so nothing they started rewrites the report.
    return (
      f"{KILL_STRAYS}\n{check}cd {shlex.quote(task.workdir)} || exit 90\n{head}"
      f"/usr/bin/env -i {env_s} /usr/bin/timeout -k 5 {int(timeout)} {run}\n__rc=$?\n"
      f"{KILL_STRAYS}\n{tail}"
      f'echo "{_RC_MARK}${{__rc}}@@{nonce}"'
    )

  def _score_pytest(
    self, task: Task, xml: str | None, nonce: str, rc: int, base: dict
  ) -> GradeResult:
    fail = dict(passed=False, reward=0.0, failure_mode="parse_error")
    if rc == 86:
      return GradeResult(
        passed=False,
        reward=0.0,
        failure_mode="none",
        detail="a test-script step after pytest failed",
        **base,
      )
    if not xml or not xml.strip():
      return GradeResult(
        **fail,
        detail=f"no test report (pytest exit {rc}): the suite did not demonstrably run",
        **base,
      )
    try:
      cases = parse_junit(xml.encode()[:_MAX_REPORT], nonce)
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
    missing = [m for m in test_modules(task) if not any(m in c.name for c in cases)]
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

  def _score_shell(self, task: Task, report: str | None, rc: int, base: dict) -> GradeResult:
    """A test.sh runner: reward.json ({name: number}) or reward.txt (a number) in its logs."""
    fail = dict(passed=False, reward=0.0, failure_mode="parse_error")
    raw_json, raw_txt = ((report or "").split("\n") + ["", ""])[:2]
    values: dict[str, float] = {}
    try:
      data = json.loads(base64.b64decode(raw_json))
      values = {
        str(k): float(v)
        for k, v in (data.items() if isinstance(data, dict) else [("reward", data)])
      }
    except (ValueError, TypeError):
      try:
        values = {"reward": float(base64.b64decode(raw_txt).decode().strip())}
      except (ValueError, UnicodeDecodeError):
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
