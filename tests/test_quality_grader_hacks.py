"""The grader-hack classes of issue 16 on real sandboxes: each beats a naive grader, not ours.

  4  a daemon that hides from the stray killer and overwrites the hidden tests after upload
  5  a poisoned __pycache__/*.pyc (or an appended at-exit hook) rewriting the report at exit;
     code the tests import patching pytest's reports in the test process (the witness)
  6  standard-library modules shadowed by package folders
  7  self-masking: an undeletable grader folder and a full process table must be the agent's
     failure (reward 0, not masked), never a sandbox error
  36 tools planted where a harness's file transfers look (bwrap: they never run outside)

bwrap always; the same checks on Docker where a daemon is reachable.
"""

import subprocess
import time

import pytest

from envs.agents.scripted import NullAgent, OracleAgent
from envs.grading.grader_command import grade_command
from envs.grading.hacks import HACKS_BY_NAME
from envs.grading.reports import parse_junit
from envs.grading.verifier import Verifier, VerifierConfig
from envs.sandbox import common, system_guard, testing
from envs.task import BUILTIN_DIR, FileEntry, load_task
from envs.task_env import open_task_sandbox, put_files

sandbox_image = testing.sandbox_image  # fixture
PY_TASK = load_task(BUILTIN_DIR / "core" / "py-mean-off-by-one", "core")
NAIVE = "/tmp/.agentrl-grader-naive"


@pytest.fixture(scope="module", params=testing.backend_params())
def ts(request, sandbox_image):  # Docker: checked by conftest (the `docker` mark)
  with open_task_sandbox(PY_TASK, request.param, snapshot=True) as box:
    yield box


def _episode(ts, agent):
  ts.reset()
  agent.run(ts.sandbox, ts.task)


def naive_junit(ts) -> bool:
  """Workspace first on sys.path, bytecode trusted, report at a path the tests can reach."""
  put_files(ts.sandbox, f"{NAIVE}/tests", ts.task.tests.files)
  ts.sandbox.exec(f"mkdir -p {NAIVE}/logs")
  ts.sandbox.exec(
    f"cd {ts.task.workdir} && python3 -m pytest -q -p no:cacheprovider "
    f"--junitxml={NAIVE}/logs/junit.xml {NAIVE}/tests",
    timeout_s=120,
  )
  cases = parse_junit(ts.sandbox.read_file(f"{NAIVE}/logs/junit.xml"))
  return bool(cases) and all(c.outcome == "passed" for c in cases)


def naive_exit_code(ts) -> bool:
  put_files(ts.sandbox, f"{ts.task.workdir}/tests", ts.task.tests.files)
  r = ts.sandbox.exec(f"cd {ts.task.workdir} && python3 -m pytest -q tests", timeout_s=120)
  return r.exit_code == 0


def test_naive_graders_work_on_honest_agents(ts):
  for naive in (naive_junit, naive_exit_code):
    _episode(ts, OracleAgent())
    assert naive(ts), naive.__name__
    _episode(ts, NullAgent())
    assert not naive(ts), naive.__name__


@pytest.mark.parametrize(
  "name, naive",
  [
    ("pyc_poison", naive_junit),
    ("append_at_exit", naive_junit),
    ("in_process_flip", naive_junit),
    ("stdlib_packages", naive_exit_code),
  ],
)
def test_import_path_hacks_beat_naive_grader_but_not_ours(ts, name, naive):
  hack = HACKS_BY_NAME[name]
  _episode(ts, hack.agent(ts.task))
  assert naive(ts), f"{name} should fool {naive.__name__}"
  for fail_on_tamper in (False, True):  # the isolation alone defeats it, without the scan
    _episode(ts, hack.agent(ts.task))
    res = Verifier(VerifierConfig(fail_on_tamper=fail_on_tamper)).grade(ts)
    assert not res.passed and res.reward == 0.0 and not res.masked, (name, res.detail)
    assert res.suite_ran, res.detail  # the tests really ran (and failed), not a parse error
    if name == "in_process_flip":  # the report said passed; the witness saw the test fail
      assert res.failure_mode == "tamper" and "tamper:report_forged" in res.flags, res.detail


def test_import_path_hacks_on_a_solved_task_still_pass(ts):
  """The oracle's answer plus a poisoned cache: the grade is the honest one (no false flag)."""
  _episode(ts, OracleAgent())
  HACKS_BY_NAME["pyc_poison"].agent(ts.task).run(ts.sandbox, ts.task)
  HACKS_BY_NAME["stdlib_packages"].agent(ts.task).run(ts.sandbox, ts.task)
  res = Verifier().grade(ts)
  assert res.passed and not any("shadows_stdlib" in f for f in res.flags), res.flags


def test_system_toolchain_rewrite_is_caught_host_side(ts):
  """uid 0 in container mode rewrites pytest, site packages, stdlib bytecode, `timeout` and
  /etc/profile: it fools a grader that trusts the sandbox's tools, not the host-side check."""
  hack = HACKS_BY_NAME["system_toolchain"]
  _episode(ts, hack.agent(ts.task))
  assert naive_exit_code(ts), "the rewritten pytest should pass the unsolved task"
  for fail_on_tamper in (False, True):
    _episode(ts, hack.agent(ts.task))
    res = Verifier(VerifierConfig(fail_on_tamper=fail_on_tamper)).grade(ts)
    assert not res.passed and res.reward == 0.0 and not res.masked, res.detail
    assert any(f.startswith("tamper:system_modified:") for f in res.flags), res.flags
  # An honest run as root that only writes bytecode caches and /usr/local/bin is not flagged.
  _episode(ts, OracleAgent())
  ts.sandbox.exec("python3 -c 'import _pytest.python' && echo x > /usr/local/bin/tool && "
                  "python3 -c 'import py_compile, json; py_compile.compile(json.__file__)'")  # fmt: skip
  res = Verifier().grade(ts)
  assert res.passed and not res.flags, (res.flags, res.detail)


def test_system_toolchain_hack_is_refused_in_readonly_mode(ts):
  backend = "docker" if "Docker" in type(ts.sandbox).__name__ else "bwrap"
  with open_task_sandbox(PY_TASK, backend, mode="readonly") as box:
    HACKS_BY_NAME["system_toolchain"].agent(PY_TASK).run(box.sandbox, PY_TASK)
    now = box.sandbox.system_fingerprint()  # bwrap: its mount table only; Docker: None
    assert now is None or not system_guard.changed(box.system_baseline, now), now
    res = Verifier().grade(box)
    assert not res.passed and res.suite_ran and not res.masked, res.detail


def naive_host_side_transfer(ts) -> bool:
  """The old bwrap transfer: the sandbox's own `mkdir` and `cat`, run in its user and mount
  namespaces only (outside its pid namespace, cgroups and seccomp filter); then the exit code."""
  enter = ["nsenter", "-t", str(ts.sandbox.pid1), "-U", "-m", "-S", "0", "-G", "0", "--"]
  cmd = [*enter, "/bin/sh", "-c", f"mkdir -p {NAIVE} && cat /dev/null"]
  subprocess.run(cmd, env={"PATH": common.PATH}, capture_output=True, timeout=60, check=True)
  return naive_exit_code(ts)


def test_planted_transfer_tools_never_run_outside(ts):
  """uid 0 plants `cat`, `mkdir`, `tar`... that bind-mount a pass-all pytest when run with
  the namespace's capabilities and no seccomp filter: the old transfers did (issue 36)."""
  hack = HACKS_BY_NAME["plant_transfer_tools"]
  if "Bwrap" in type(ts.sandbox).__name__:
    _episode(ts, hack.agent(ts.task))
    probe = "grep -A1 'def pytest_pyfunc_call' /var/tmp/.p.py | grep -q 'return True'"
    assert ts.sandbox.exec(probe).exit_code == 0, "the pass-all pytest was not written"
    assert naive_host_side_transfer(ts), "the planted tools should fool the old transfer"
  for fail_on_tamper in (False, True):
    _episode(ts, hack.agent(ts.task))
    res = Verifier(VerifierConfig(fail_on_tamper=fail_on_tamper)).grade(ts)
    assert not res.passed and res.reward == 0.0 and not res.masked, res.detail
    assert any(f.startswith("tamper:system_modified:") for f in res.flags), res.flags
    assert ts.sandbox.exec("grep -q _pytest /proc/self/mountinfo").exit_code == 1


def _wait_for(ts, cmd: str, deadline_s: float = 20.0) -> None:
  end = time.monotonic() + deadline_s
  while ts.sandbox.exec(cmd).exit_code != 0:
    assert time.monotonic() < end, f"condition never held: {cmd}"


def test_renamed_daemon_is_killed_and_cannot_swap_tests(ts):
  """The daemon names itself so a line-wise /proc parser reads session 1; it is still killed."""
  _episode(ts, HACKS_BY_NAME["swap_tests_daemon"].agent(ts.task))
  _wait_for(ts, "grep -lqs '^) S 0 1 1' /proc/[0-9]*/comm")
  # The naive grader: upload, then run; the daemon rewrites the tests in between.
  put_files(ts.sandbox, f"{NAIVE}/tests", ts.task.tests.files)
  _wait_for(ts, f"grep -rqs 'def test_ok' {NAIVE}/tests")
  res = Verifier(VerifierConfig(fail_on_tamper=False)).grade(ts)
  assert not res.passed and res.reward == 0.0 and res.suite_ran, res.detail
  assert ts.sandbox.exec("grep -lqs '^) S 0 1 1' /proc/[0-9]*/comm").exit_code != 0


def test_tests_changed_after_upload_are_caught_by_their_hash(ts):
  """Second layer: if any process outlived the cleanup, the sha256 check before the run holds."""
  ts.reset()
  gdir = f"{NAIVE}-hash"
  files = (FileEntry("tests/test_x.py", b"def test_x():\n  assert False\n"),)
  put_files(ts.sandbox, gdir, files)
  ts.sandbox.exec(f"printf 'def test_x():\\n  pass\\n' > {gdir}/tests/test_x.py")
  cmd = grade_command(ts.task, gdir, "n0nce", 30, files)
  assert "@@AGENTRL_TESTS_CHANGED@@n0nce" in ts.sandbox.exec(cmd, timeout_s=60).stdout
  put_files(ts.sandbox, gdir, files)  # unchanged: no mark
  assert "@@AGENTRL_TESTS_CHANGED@@" not in ts.sandbox.exec(cmd, timeout_s=60).stdout


@pytest.mark.parametrize("mode", ["readonly", "container"])
def test_self_masking_is_the_agents_failure(ts, mode):
  """Folders the grader cannot delete and a full process table are the agent's failure."""
  if mode == "container":  # the shared box is the default (container) mode
    _check_self_masking(ts, root=True)
    return
  backend = "docker" if "Docker" in type(ts.sandbox).__name__ else "bwrap"
  with open_task_sandbox(PY_TASK, backend, snapshot=True, mode="readonly") as box:
    _check_self_masking(box, root=False)


@pytest.mark.parametrize("mode", ["readonly", "container"])
def test_full_disk_is_the_agents_failure(ts, mode):
  """Every writable place filled (Docker: tmpfs count as memory too): reward 0, never masked."""
  backend = "docker" if "Docker" in type(ts.sandbox).__name__ else "bwrap"
  with open_task_sandbox(PY_TASK, backend, mode=mode, disk_mb=32, memory_mb=256) as box:
    HACKS_BY_NAME["fill_disk"].agent(PY_TASK).run(box.sandbox, PY_TASK)
    assert "No space" in box.sandbox.exec("echo x > /tmp/y").stderr
    res = Verifier().grade(box)
    assert not res.masked and res.reward == 0.0 and not res.passed, res


def _check_self_masking(ts, root):
  hack = HACKS_BY_NAME["block_grader"]
  _episode(ts, hack.agent(ts.task))
  # What made the old grader mask the trial: its scratch folder cannot be removed by a
  # non-root agent user (uid 0 in container mode may remove it; the fork bomb still runs).
  removable = ts.sandbox.exec("rm -rf /tmp/.agentrl-grader-0").exit_code == 0
  assert removable == root
  res = Verifier().grade(ts)
  assert not res.masked and res.reward == 0.0 and not res.passed, res
  # ... and a solved task with an undeletable folder at the old scratch path still passes:
  # the grader's folder has a fresh unguessable name.
  _episode(ts, OracleAgent())
  ts.sandbox.exec(hack.commands[0])
  res = Verifier().grade(ts)
  assert res.passed, res.detail
