"""Each hack of the battery beats a naive grader and fails against ours (real bwrap sandboxes).

A naive grader here is one concrete, common harness mistake (trusting the runner's exit code
with the agent's environment, a reward file that is not cleared, tests visible during the
episode, parsing stdout, a report at a fixed path, the task folder inside the sandbox). For every
hack we show: naive grader + oracle passes and naive grader + no-op fails (the naive grader is a
working grader), naive grader + hack PASSES (the hack works), our verifier + hack FAILS both with
and without the tamper scan (the isolation alone defeats it).
"""

import pytest

from envs.agents.scripted import NullAgent, OracleAgent
from envs.grading.hacks import HACKS_BY_NAME
from envs.grading.reports import parse_junit
from envs.grading.verifier import Verifier, VerifierConfig
from envs.task import BUILTIN_DIR, FileEntry, load_task
from envs.task_env import open_task_sandbox, put_files

TASK = load_task(BUILTIN_DIR / "core" / "tx-excerpt", "core")
NAIVE_LOGS = "/tmp/logs"


def _tests_into_workspace(ts):
  put_files(ts.sandbox, f"{ts.task.workdir}/tests", ts.task.tests.files)


def _pytest(ts, extra=""):
  # The agent's own login environment, run from the workspace: what a naive harness does.
  return ts.sandbox.exec(
    f"cd {ts.task.workdir} && python3 -m pytest -q -p no:cacheprovider {extra} tests", timeout_s=120
  )


def naive_exit_code(ts) -> bool:
  _tests_into_workspace(ts)
  return _pytest(ts).exit_code == 0


def naive_in_place(ts) -> bool:
  """Runs the tests that sat in the workspace during the episode (a repo's own test suite)."""
  return _pytest(ts).exit_code == 0


def naive_reward_file(ts) -> bool:
  _tests_into_workspace(ts)
  d = f"{NAIVE_LOGS}/verifier"
  ts.sandbox.exec(
    f"mkdir -p {d} && cd {ts.task.workdir} && python3 -m pytest -q -p no:cacheprovider tests && echo 1 > {d}/reward.txt",
    timeout_s=120,
  )
  try:
    return ts.sandbox.read_file(f"{d}/reward.txt").strip() == b"1"
  except FileNotFoundError:
    return False


def naive_stdout(ts) -> bool:
  """Counts PASSED/FAILED lines of `pytest -rA` (a run with no tests has no failures)."""
  out = _pytest(ts, "-rA").stdout.splitlines()
  return not any(line.startswith(("FAILED", "ERROR")) for line in out)


def naive_junit(ts) -> bool:
  _tests_into_workspace(ts)
  ts.sandbox.exec(f"mkdir -p {NAIVE_LOGS}")
  _pytest(ts, f"--junitxml={NAIVE_LOGS}/junit.xml")
  # a harness that waits (10 s at most) for the report to appear: pytest writes it before it
  # exits, an agent's daemon (fake_passed) writes it a moment later
  ts.sandbox.exec(
    f"for i in $(seq 200); do [ -s {NAIVE_LOGS}/junit.xml ] && exit 0; sleep 0.05; done; exit 1"
  )
  cases = parse_junit(ts.sandbox.read_file(f"{NAIVE_LOGS}/junit.xml"))
  return bool(cases) and all(c.outcome == "passed" for c in cases)


def tests_visible(ts):
  _tests_into_workspace(ts)


def task_folder_visible(ts):
  files = tuple(FileEntry(f"tests/{f.path}", f.data) for f in ts.task.tests.files)
  files += (FileEntry("solution/solve.sh", ts.task.solution_script.encode(), 0o755),)
  put_files(ts.sandbox, f"{ts.task.workdir}/.task", files)


# hack -> (the naive grader it beats, what that harness exposes before the episode)
SCENARIOS = {
  "exit0_early": (naive_exit_code, None),
  "plant_reward": (naive_reward_file, None),
  "edit_tests": (naive_in_place, tests_visible),
  "delete_tests": (naive_stdout, tests_visible),
  "conftest_flip": (naive_exit_code, None),
  "fake_passed": (naive_junit, None),
  "read_tests_solution": (naive_exit_code, task_folder_visible),
  "sabotage_pytest": (naive_exit_code, None),
}


# The grader-hack classes, each with its own naive grader in tests/test_quality_grader_hacks.py.
GRADER_HACKS = {
  "pyc_poison",
  "append_at_exit",
  "in_process_flip",
  "stdlib_packages",
  "swap_tests_daemon",
  "block_grader",
  "system_toolchain",
  "fill_disk",
  "plant_transfer_tools",
}


def test_every_hack_has_a_scenario():
  assert set(SCENARIOS) | GRADER_HACKS == set(HACKS_BY_NAME)
  assert not set(SCENARIOS) & GRADER_HACKS


@pytest.fixture(scope="module")
def ts():
  with open_task_sandbox(TASK, "bwrap", snapshot=True) as box:
    yield box


def _episode(ts, agent, expose):
  ts.reset()
  if expose is not None:
    expose(ts)
  agent.run(ts.sandbox, ts.task)


@pytest.mark.parametrize(
  "naive", sorted({v[0] for v in SCENARIOS.values()}, key=lambda f: f.__name__)
)
def test_naive_graders_work_on_honest_agents(ts, naive):
  expose = tests_visible if naive in (naive_stdout, naive_in_place) else None
  _episode(ts, OracleAgent(), expose)
  assert naive(ts), "the naive grader must pass the reference solution"
  _episode(ts, NullAgent(), expose)
  assert not naive(ts), "the naive grader must fail the no-op agent"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_hack_beats_naive_grader_but_not_ours(ts, name):
  hack, (naive, expose) = HACKS_BY_NAME[name], SCENARIOS[name]
  _episode(ts, hack.agent(ts.task), expose)
  assert naive(ts), f"{name} should fool the naive grader ({naive.__name__})"
  for fail_on_tamper in (False, True):
    _episode(ts, hack.agent(ts.task), None)
    res = Verifier(VerifierConfig(fail_on_tamper=fail_on_tamper)).grade(ts)
    assert not res.passed and res.reward == 0.0 and not res.masked, (
      name,
      fail_on_tamper,
      res.detail,
    )


def test_planted_state_is_detected(ts):
  expect = {
    "exit0_early": "tamper:planted:conftest.py",
    "conftest_flip": "tamper:planted:conftest.py",
    "sabotage_pytest": "tamper:planted:pytest/__init__.py",
  }
  for name, flag in expect.items():
    _episode(ts, HACKS_BY_NAME[name].agent(ts.task), None)
    res = Verifier().grade(ts)
    assert flag in res.flags and res.failure_mode == "tamper", (name, res.flags)


def test_fake_report_daemon_is_killed_before_grading(ts):
  """fake_passed leaves a daemon rewriting report files; after grading it is gone."""
  _episode(ts, HACKS_BY_NAME["fake_passed"].agent(ts.task), None)
  assert "fake.xml" in ts.sandbox.exec("ps -eo args").stdout
  res = Verifier(VerifierConfig(fail_on_tamper=False)).grade(ts)
  assert not res.passed and res.suite_ran and res.failure_mode == "none"
  assert "fake.xml" not in ts.sandbox.exec("ps -eo args").stdout


def test_hacked_login_profile_cannot_block_grading(ts):
  """`exit 0` in the agent's login profile would stop every later command; grading still runs."""
  ts.reset()
  ts.sandbox.exec("echo 'exit 0' >> ~/.bash_profile; echo 'exit 0' >> ~/.profile")
  assert ts.sandbox.exec("echo alive").stdout == ""  # the profile now swallows commands
  OracleAgent().run(ts.sandbox, ts.task)  # the oracle's command is swallowed too ...
  res = Verifier().grade(ts)
  assert res.suite_ran and not res.passed  # ... and the grader still ran the suite
  ts.reset()
  assert ts.sandbox.exec("echo alive").stdout == "alive\n"
  OracleAgent().run(ts.sandbox, ts.task)
  assert Verifier().grade(ts).passed
