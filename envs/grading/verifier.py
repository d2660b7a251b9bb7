"""Grades the end state of an episode with the task's hidden tests.

The tests enter the sandbox only now (mode `after`), or the agent's workspace is carried
into a fresh copy of the task environment first (mode `fresh`). Before the tests are
uploaded, every process the agent left is killed (with `keep_services`, Terminal-Bench's
rule, all but its listening services: envs.sandbox.services) and the grader's folders are
created under a fresh unguessable name; the uploaded files are checked against their sha256
right before they run. What runs in the sandbox is built by envs.grading.grader_command
(pytest isolated from the agent's environment, the report out of the test process's reach);
what it printed is scored by envs.grading.scoring (failure modes, masking). Anything the agent
can cause in a live sandbox is the agent's failure (`grader_blocked`), never an
infrastructure mask.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shlex
import tempfile
import time
import uuid

from envs.grading.grader_command import (
  GRADER_ROOT,
  OUTPUT_BEGIN,
  OUTPUT_END,
  RC_MARK,
  REPORT_BEGIN,
  REPORT_END,
  TESTS_CHANGED,
  WITNESS,
  grade_command,
  hidden_test_files,
  prepare_command,
  runner_files,
)
from envs.grading.reports import changed_sources, tamper_flags, task_paths
from envs.grading.scoring import (
  MAX_REPORT,
  GradeResult,
  exhausted_result,
  masked_result,
  score_pytest,
  score_shell,
)
from envs.sandbox import genuine, services, system_guard
from envs.sandbox.base import Sandbox, SandboxError, SandboxExhaustedError
from envs.sandbox.rootview import RootView
from envs.task import FileEntry, Task
from envs.task_env import (
  TaskSandbox,
  TaskSetupError,
  kill_strays,
  manifest_cmd,
  neutralize_login,
  put_files,
)


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
  # The agent's listening processes stay up while the tests run (Terminal-Bench's harness);
  # None: the task's choice (TestSpec.keep_services). Never in "fresh" mode.
  keep_services: bool | None = None


def _alive(sb: Sandbox) -> bool:
  try:
    return bool(sb.alive)
  except Exception:  # noqa: BLE001 - a backend that cannot tell is not alive
    return False


def _between(text: str, start: str, end: str) -> str | None:
  i = text.find(start)
  j = text.find(end, i + len(start)) if i >= 0 else -1
  return text[i + len(start) : j] if i >= 0 and j >= 0 else None


def _decoded(b64: str | None) -> str:
  try:
    return base64.b64decode(b64 or "").decode("utf-8", "replace")
  except ValueError:
    return ""


def system_flags(sb: Sandbox, baseline: dict[str, str] | None) -> tuple[list[str], list[str]]:
  """(`tamper:system_modified:...` when the agent changed what the grader runs in the sandbox
  (pytest, python, bash, the loader: a writable root in container mode), read host-side;
  notes on packages that could not be verified). With package egress, a genuine package's
  files are no change (genuine.py)."""
  now = sb.system_fingerprint() if baseline is not None else None
  diff = system_guard.changed(baseline, now) if now is not None else []
  sources, notes = sb.package_sources() if diff else None, []
  layers = sb.system_layers() if sources is not None else None
  if layers is not None:
    diff, notes = genuine.excuse(diff, baseline, now, RootView(*layers), sources)
  more = f"(+{len(diff) - 3})" if len(diff) > 3 else ""
  return ([f"tamper:system_modified:{','.join(diff[:3])}{more}"] if diff else []), notes


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
      keep = mode == "after" and self._keeps(task)
      res = self._grade_in(box, task, ts.baseline, (fresh or ts).system_baseline, keep)
    except TaskSetupError as e:
      return masked_result(task.id, "task_error", str(e), time.monotonic() - t0)
    except (SandboxError, OSError) as e:
      why = f"{type(e).__name__}: {e}"
      if isinstance(e, SandboxExhaustedError):  # an OOM kill in the sandbox's own cgroup
        return exhausted_result(task.id, why, time.monotonic() - t0)
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

  def _keeps(self, task: Task) -> bool:
    ks = self.cfg.keep_services
    return task.tests.keep_services if ks is None else ks

  def _fresh_box(self, ts: TaskSandbox) -> tuple[Sandbox, TaskSandbox | None]:
    """The agent's workspace inside a fresh copy of the task environment (no process can
    follow it there: keep_services has no effect in this mode)."""
    task, wd = ts.task, shlex.quote(ts.task.workdir)
    kill_strays(ts.sandbox)
    with tempfile.TemporaryDirectory(prefix="agentrl-fresh-") as tmp:
      ts.sandbox.download(task.workdir, f"{tmp}/ws")
      if self.cfg.fresh_reuse_pristine and ts.pristine is not None:
        box, owner = ts.sandbox, ts
        box.restore(ts.pristine)
      else:
        owner = ts.reopen()  # the task's own image and limits
        box = owner.sandbox
      box.exec(f"find {wd} -mindepth 1 -delete", timeout_s=60)
      box.upload(f"{tmp}/ws", task.workdir)
    return box, owner

  def _grade_in(
    self,
    sb: Sandbox,
    task: Task,
    baseline: dict[str, str],
    system: dict[str, str] | None,
    keep_services: bool = False,
  ) -> GradeResult:
    nonce = uuid.uuid4().hex
    gdir = f"{GRADER_ROOT}-{nonce}"
    tdir, ldir = f"{gdir}/tests", f"{gdir}/logs"
    neutralize_login(sb)
    # The prepare script runs the in-sandbox backstop; kept services survive both.
    kept = kill_strays(sb, backstop=False, keep_services=keep_services)
    kept_flag = (f"kept_services:{services.names(kept)}",) if kept else ()
    bad, notes = system_flags(sb, system)
    if bad:  # nothing the sandbox runs can be trusted now
      why = "the agent changed what the grader runs in the sandbox (python, pytest, bash, libs)"
      why += "".join(f"; {n}" for n in notes[:5])
      why += f"; (+{len(notes) - 5} more notes)" if len(notes) > 5 else ""
      return GradeResult(task.id, False, 0.0, "tamper", flags=(*bad, *kept_flag), detail=why)
    flags = self._prepare(sb, task, baseline, gdir, nonce, kept)
    if flags is None:
      why = "the grader could not prepare its folders in the live sandbox"
      return GradeResult(task.id, False, 0.0, "grader_blocked", flags=kept_flag, detail=why)
    flags += kept_flag
    files = tuple(
      FileEntry(f"tests/{f.path}", f.data, f.mode) for f in hidden_test_files(task, tdir, ldir)
    )
    files += runner_files(task, gdir)
    try:
      put_files(sb, gdir, files)
    except OSError as e:  # the sandbox is up but refuses the files: the agent filled /tmp
      why = f"could not copy the tests into the sandbox: {e}"
      return GradeResult(
        task.id, False, 0.0, "grader_blocked", flags=tuple(flags), detail=why[-1000:]
      )
    timeout = self.cfg.test_timeout_s or task.test_timeout_s
    egress = getattr(sb, "egress", None)  # the task's network allowed package sources
    cmd = grade_command(task, gdir, nonce, timeout, files, kept, egress.env() if egress else {})
    r = sb.exec(cmd, timeout_s=timeout + 60)
    m = re.search(re.escape(RC_MARK) + r"(\d+)@@" + nonce, r.stdout)
    rc = int(m.group(1)) if m else None
    report = _between(r.stdout, f"{REPORT_BEGIN}{nonce}\n", f"\n{REPORT_END}{nonce}")
    stdout = r.stdout if report is None else r.stdout.replace(report, "[report]")
    output = _between(stdout, f"{OUTPUT_BEGIN}{nonce}\n", f"\n{OUTPUT_END}{nonce}")
    stdout = stdout if not output else stdout.replace(output, "[output]")
    log = (stdout + "\n--- stderr ---\n" + r.stderr)[-self.cfg.max_log_chars :]
    text = _decoded(output).replace(tdir, "/tests").replace(ldir, "/logs/verifier")
    base = dict(task_id=task.id, exit_code=rc, flags=tuple(flags), log=log, output=text)
    if f"{TESTS_CHANGED}{nonce}" in r.stdout:
      why = "the hidden tests changed after upload (a process outlived the cleanup"
      why += ", or a kept service rewrote them)" if kept else ")"
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
    kind, strict = self.cfg.reward or task.tests.reward, self.cfg.fail_on_tamper
    if task.tests.runner == "shell":
      return score_shell(report, rc, base, kind, strict)
    xml = None if r.truncated else report
    res = score_pytest(task, xml, nonce, rc, base, kind, strict, WITNESS)
    if not task.tests.rewrite_paths:
      return res
    return dataclasses.replace(res, tests=tuple(task_paths(list(res.tests), tdir, ldir)))

  def _prepare(
    self,
    sb: Sandbox,
    task: Task,
    baseline: dict[str, str],
    gdir: str,
    nonce: str,
    kept: tuple[services.Service, ...] = (),
  ) -> list[str] | None:
    """Makes the grader folders (killing strays again, but `kept`), scans the workspace for
    tampering.

    None: the grader could not make its folders (the agent's doing, in a live sandbox).
    """
    r = sb.exec(prepare_command(gdir, nonce, manifest_cmd(task.workdir), kept), timeout_s=60)
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
        contents[p] = sb.read_file(f"{task.workdir}/{p}")[:MAX_REPORT]
      except (SandboxError, OSError):
        pass
    return tamper_flags(baseline, now, contents, cwd_on_path=task.tests.runner == "shell")


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
