"""The grader-hack classes of issue 16 on real sandboxes: each beats a naive grader, not ours.

  4  a daemon that hides from the stray killer and overwrites the hidden tests after upload
  5  a poisoned __pycache__/*.pyc (or an appended at-exit hook) rewriting the report at exit
  6  standard-library modules shadowed by package folders
  7  self-masking: an undeletable grader folder and a full process table must be the agent's
     failure (reward 0, not masked), never a sandbox error

bwrap always; the same checks on Docker where a daemon is reachable.
"""

import shutil
import time

import pytest

from envs.grading import parse_junit
from envs.hacks import HACKS_BY_NAME
from envs.scripted_agent import NullAgent, OracleAgent
from envs.task import BUILTIN_DIR, FileEntry, load_task
from envs.task_env import open_task_sandbox, put_files
from envs.verifier import Verifier, VerifierConfig

PY_TASK = load_task(BUILTIN_DIR / "core" / "py-mean-off-by-one", "core")
NAIVE = "/tmp/.agentrl-grader-naive"


def _docker_ok() -> bool:
  try:
    import docker

    docker.from_env().ping()
    return True
  except Exception:  # noqa: BLE001 - no daemon: the docker half is skipped
    return False


BACKENDS = ["bwrap"] + (["docker"] if shutil.which("docker") and _docker_ok() else [])


@pytest.fixture(scope="module", params=BACKENDS)
def ts(request):
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


def test_import_path_hacks_on_a_solved_task_still_pass(ts):
  """The oracle's answer plus a poisoned cache: the grade is the honest one (no false flag)."""
  _episode(ts, OracleAgent())
  HACKS_BY_NAME["pyc_poison"].agent(ts.task).run(ts.sandbox, ts.task)
  HACKS_BY_NAME["stdlib_packages"].agent(ts.task).run(ts.sandbox, ts.task)
  res = Verifier().grade(ts)
  assert res.passed and not any("shadows_stdlib" in f for f in res.flags), res.flags


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
  v = Verifier()
  gdir = f"{NAIVE}-hash"
  files = (FileEntry("tests/test_x.py", b"def test_x():\n  assert False\n"),)
  put_files(ts.sandbox, gdir, files)
  ts.sandbox.exec(f"printf 'def test_x():\\n  pass\\n' > {gdir}/tests/test_x.py")
  cmd = v._command(ts.task, gdir, "n0nce", 30, files)
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
