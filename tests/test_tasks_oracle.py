"""The oracle runs a Harbor reference solution as Harbor does: solution/ at /solution (real
bwrap sandbox, container-like mode), so `cp /solution/x.py .` in solve.sh works; the no-op
agent still fails the task."""

from task_files import write

from envs import eval as ev
from envs.formats.loading import load_any
from envs.grading.quality import GateConfig, gate_task
from envs.sandbox import testing
from envs.task_env import task_spec

backend, sandbox_image = testing.backend, testing.sandbox_image  # fixtures

HARBOR = {
  "task.toml": 'version = "1.0"\n[metadata]\ndifficulty = "easy"\ncategory = "text"\n',
  "instruction.md": "Write /app/solve.py printing the word count of /app/data/words.txt to out.txt.\n",
  "environment/Dockerfile": "FROM python:3.12-slim\nWORKDIR /app\nCOPY data/ /app/data/\n",
  "environment/data/words.txt": "a b c\nd\n",
  "solution/solve.py": "n = len(open('/app/data/words.txt').read().split())\nopen('/app/out.txt', 'w').write(f'{n}\\n')\n",
  "solution/solve.sh": "#!/bin/bash\nset -e\ncp /solution/solve.py /app/solve.py\npython3 /app/solve.py\n",
  "tests/test_outputs.py": """
    from pathlib import Path

    def test_script_and_count():
        assert Path("/app/solve.py").exists()
        assert Path("/app/out.txt").read_text() == "4\\n"
  """,
}


def test_harbor_solution_is_staged_at_slash_solution(tmp_path):
  task = load_any(write(tmp_path / "s" / "wc-words", HARBOR))
  (oracle,) = ev.evaluate([task], ev.make_agent("oracle"), ev.EvalConfig())
  assert oracle["passed"], oracle["detail"]
  assert "/solution/solve.sh" in oracle["trajectory"][0]["action"]
  (null,) = ev.evaluate([task], ev.make_agent("null"), ev.EvalConfig())
  assert not null["passed"] and null["grade_failure_mode"] == "none"


def test_allow_internet_grants_package_egress_only(tmp_path):
  """Harbor's allow_internet (default true) becomes network="packages"; false: no network;
  task_spec(package_egress=False) (launch.eval --nopackage_egress) turns it off."""
  cases = (("", "packages"), ("allow_internet = true\n", "packages"))
  cases += (("allow_internet = false\n", False),)
  for i, (line, want) in enumerate(cases):
    files = dict(HARBOR)
    files["task.toml"] += "[environment]\n" + line
    task = load_any(write(tmp_path / str(i) / "net-task", files))
    assert task.network == want and dict(task.metadata)["allow_internet"] is bool(want)
    assert task_spec(task).network == want
    assert task_spec(task, package_egress=False).network is False


def test_a_task_without_a_reference_solution_loads_for_policies_not_for_the_oracle(tmp_path):
  """Hidden tests are enough to grade an agent: such a task loads and grades; the oracle's run
  is the task's error (masked, named) and the gate fails it, naming why."""
  files = {k: v for k, v in HARBOR.items() if not k.startswith("solution/")}
  task = load_any(write(tmp_path / "s" / "no-solution", files))
  assert not task.has_solution and load_any(write(tmp_path / "t" / "wc", HARBOR)).has_solution
  (null,) = ev.evaluate([task], ev.make_agent("null"), ev.EvalConfig())
  assert not null["passed"] and null["grade_failure_mode"] == "none"  # graded, failed
  (oracle,) = ev.evaluate([task], ev.make_agent("oracle"), ev.EvalConfig())
  assert (
    oracle["grade_failure_mode"] == "task_error" and "no reference solution" in oracle["detail"]
  )
  report = gate_task(task, GateConfig(k=1, hacks=()))
  assert not report.ok and "no reference solution" in report.reasons[0]


def _oracle_on(
  tmp_path, name: str, dockerfile: str | None = None, tests: str = "", files=(), backend="bwrap"
):
  """The reference solution's trial on HARBOR with another Dockerfile, tests appended to its
  test file and other files ({path: text}), on `backend`."""
  f = dict(HARBOR, **{"tests/test_outputs.py": HARBOR["tests/test_outputs.py"] + tests})
  f.update(files)
  if dockerfile is not None:
    f["environment/Dockerfile"] = dockerfile
  task = load_any(write(tmp_path / "s" / name, f))
  (oracle,) = ev.evaluate([task], ev.make_agent("oracle"), ev.EvalConfig(backend=backend))
  return oracle


def test_a_step_that_creates_usr_bin_python_replays_as_in_docker(tmp_path):
  """The public images have no /usr/bin/python: `ln -s /usr/bin/python3 /usr/bin/python` (a
  common Dockerfile step) works there, so it must work on the base image too; a python:* image
  keeps its `python` (in /usr/local/bin)."""
  dockerfile = (
    "FROM ubuntu:24.04\nWORKDIR /app\nRUN ln -s /usr/bin/python3 /usr/bin/python\n"
    "COPY data/ /app/data/\n"
  )
  tests = (
    "\n    def test_python_is_the_tasks_link():\n"
    '        assert Path("/usr/bin/python").resolve() == Path("/usr/bin/python3").resolve()\n'
  )
  oracle = _oracle_on(tmp_path, "py-link", dockerfile, tests)
  assert oracle["passed"], oracle["detail"]
  dockerfile = "FROM python:3.12-slim\nWORKDIR /app\nCOPY data/ /app/data/\n"
  solve = HARBOR["solution/solve.sh"].replace("python3 ", "python ")
  oracle = _oracle_on(tmp_path, "py-slim", dockerfile, files={"solution/solve.sh": solve})
  assert oracle["passed"], oracle["detail"]  # `python` is /usr/local/bin/python there


def test_a_step_that_creates_the_user_agent_replays_as_in_docker(tmp_path):
  """No public image has a user `agent` (the base image has, for the read-only mode): a
  Dockerfile's `useradd -m -u 1000 agent` works there, so it must replay here too."""
  dockerfile = (
    "FROM python:3.12-slim\nRUN useradd -m -s /bin/bash -u 1000 agent\nWORKDIR /app\n"
    "COPY data/ /app/data/\n"
  )
  tests = (
    "\n    def test_the_tasks_user():\n"
    "        import pwd\n"
    '        u = pwd.getpwnam("agent")\n'
    '        assert (u.pw_uid, u.pw_shell) == (1000, "/bin/bash") and Path(u.pw_dir).is_dir()\n'
  )
  oracle = _oracle_on(tmp_path, "user-agent", dockerfile, tests)
  assert oracle["passed"], oracle["detail"]


def test_a_parametrized_test_is_named_with_the_tasks_paths(tmp_path):
  """/tests runs from a grader folder with a random name; a test parametrized with a /tests
  path keeps the task's name for it, the same in every trial."""
  tests = (
    "\n    import pytest\n\n"
    '    @pytest.mark.parametrize("path", ["/tests/data/n.txt"])\n'
    "    def test_expected(path):\n"
    '        assert Path("/app/out.txt").read_text() == Path(path).read_text()\n'
  )
  oracle = _oracle_on(tmp_path, "param-path", tests=tests, files={"tests/data/n.txt": "4\n"})
  assert oracle["passed"], oracle["detail"]
  names = [t["name"] for t in oracle["tests"]]
  assert "test_outputs::test_expected[/tests/data/n.txt]" in names, names


def test_copy_into_an_existing_folder_keeps_its_mode(tmp_path):
  """Docker's COPY leaves an existing destination folder as it is: /tmp stays 1777."""
  dockerfile = HARBOR["environment/Dockerfile"] + "COPY data/ /tmp/\n"
  tests = (
    "\n    def test_tmp_mode():\n"
    "        import os\n"
    '        assert Path("/tmp/words.txt").exists()\n'
    '        assert oct(os.stat("/tmp").st_mode & 0o7777) == "0o1777"\n'
  )
  oracle = _oracle_on(tmp_path, "copy-tmp", dockerfile, tests)
  assert oracle["passed"], oracle["detail"]


def test_the_dockerfiles_user_runs_the_solution_and_the_tests(tmp_path):
  """As in Docker: the set-up runs as root (useradd, chown), then the Dockerfile's USER runs
  the agent, the reference solution (still from /solution) and the tests."""
  dockerfile = (
    "FROM python:3.12-slim\nRUN useradd -m bob\nWORKDIR /app\nCOPY data/ /app/data/\n"
    "RUN chown -R bob /app\nUSER bob\n"
  )
  tests = (
    "\n    def test_user():\n"
    "        import getpass\n"
    '        assert getpass.getuser() == "bob" and Path("/app/out.txt").owner() == "bob"\n'
  )
  oracle = _oracle_on(tmp_path, "user-bob", dockerfile, tests)
  assert oracle["passed"], oracle["detail"]
  assert "/solution/solve.sh" in oracle["trajectory"][0]["action"]
  oracle = _oracle_on(tmp_path, "user-al", dockerfile.replace("USER bob", "USER al"), tests)
  assert oracle["grade_failure_mode"] == "task_error" and "USER al" in oracle["detail"]


def test_the_final_user_takes_a_group_or_a_bare_uid(tmp_path, backend):
  """As in Docker: `USER bob:staff` runs the agent and the tests with staff's gid, and
  `USER 4242` (no passwd entry) with uid 4242 and gid 0; on both backends."""
  base = "FROM python:3.12-slim\nRUN useradd -m bob\nWORKDIR /app\nCOPY data/ /app/data/\n"
  ids = (
    "\n    def test_ids():\n"
    "        import grp, os, pwd\n"
    '        ids = (os.getuid(), os.getgid(), os.stat("/app/out.txt").st_gid)\n'
    "        assert ids == {}, ids\n"
  )
  staff = '(pwd.getpwnam("bob").pw_uid, *[grp.getgrnam("staff").gr_gid] * 2)'
  grouped = base + "RUN chown -R bob /app\nUSER bob:staff\n"
  oracle = _oracle_on(tmp_path, "user-group", grouped, ids.format(staff), backend=backend)
  assert oracle["passed"], oracle["detail"]
  bare = base + "RUN chmod 1777 /app\nUSER 4242\n"
  oracle = _oracle_on(tmp_path, "user-uid", bare, ids.format("(4242, 0, 0)"), backend=backend)
  assert oracle["passed"], oracle["detail"]
  oracle = _oracle_on(tmp_path, "user-nogroup", base + "USER bob:nogroupx\n", ids.format("()"))
  assert oracle["grade_failure_mode"] == "task_error" and "no group" in oracle["detail"]


def test_a_run_after_user_runs_as_that_user(tmp_path, backend):
  """As in Docker: each RUN runs as the USER before it (its HOME; `USER root` switches back),
  COPY --chown owns the copied files, and a RUN as a user that does not exist yet is the
  task's error naming the line; on both backends."""
  dockerfile = (
    "FROM python:3.12-slim\nRUN useradd -m bob\nWORKDIR /app\nCOPY data/ /app/data/\n"
    "COPY --chown=bob:bob data/ /opt/bobs/\nUSER bob\n"
    "RUN whoami > /tmp/who-1 && echo $HOME > /tmp/home-1 && touch /tmp/bobs-file\n"
    "USER root\nRUN whoami > /tmp/who-2 && chown -R bob /app\nUSER bob\n"
  )
  tests = (
    "\n    def test_run_users():\n"
    '        assert Path("/tmp/who-1").read_text() == "bob\\n"\n'
    '        assert Path("/tmp/home-1").read_text() == "/home/bob\\n"\n'
    '        assert Path("/tmp/bobs-file").owner() == "bob"\n'
    '        assert Path("/tmp/who-2").read_text() == "root\\n"\n'
    '        assert Path("/opt/bobs/words.txt").owner() == "bob"\n'
    '        assert Path("/opt/bobs/words.txt").group() == "bob"\n'
    '        assert Path("/app/data/words.txt").owner() == "bob"  # the root RUN\'s chown\n'
  )
  oracle = _oracle_on(tmp_path, "run-as-bob", dockerfile, tests, backend=backend)
  assert oracle["passed"], oracle["detail"]
  late = dockerfile.replace("RUN useradd -m bob\n", "").replace("USER root", "RUN useradd -m bob")
  late = late.replace("COPY --chown=bob:bob data/ /opt/bobs/\n", "")  # line 5: RUN as bob
  oracle = _oracle_on(tmp_path, "run-as-nobody-yet", late, tests, backend=backend)
  assert oracle["grade_failure_mode"] == "task_error", oracle["detail"]
  assert "Dockerfile:5" in oracle["detail"] and "no user bob" in oracle["detail"]


TB1_PARSED = {  # the aider-polyglot pattern: a test script that prints pytest's summary itself
  # (a slim base: buildpack-deps' package layer would be built for nothing in each fresh CI)
  "task.yaml": "instruction: Write hello to /app/out.txt.\nparser_name: pytest\n",
  "Dockerfile": "FROM python:3.12-slim\nWORKDIR /app\nRUN mkdir -p /tests\nENV TEST_DIR=/tests\n",
  "solution.sh": "#!/bin/bash\necho hello > /app/out.txt\n",
  "run-tests.sh": """
    #!/bin/bash
    set -Eeuo pipefail
    if [ ! -d "$TEST_DIR" ]; then echo "ERROR: TEST_DIR $TEST_DIR does not exist"; exit 1; fi
    set +e
    diff "$TEST_DIR/expected.txt" /app/out.txt
    exit_code=$?
    echo "=============== short test summary info ==============="
    if [ $exit_code -eq 0 ]; then echo "PASSED out_test"; else echo "FAILED out_test"; fi
    exit $exit_code
  """,
  "tests/expected.txt": "hello\n",
}


def test_a_tb1_script_is_scored_by_its_parser_with_the_images_test_dir(tmp_path, backend):
  """Terminal-Bench 1 scores a run-tests.sh that does not run pytest by the task's parser
  (pytest's summary lines), and the image's `ENV TEST_DIR=/tests` names the grader's copy."""
  task = load_any(write(tmp_path / "tb" / "parsed", TB1_PARSED))
  cfg = ev.EvalConfig(backend=backend)
  (oracle,) = ev.evaluate([task], ev.make_agent("oracle"), cfg)
  assert oracle["passed"], oracle["detail"]
  (null,) = ev.evaluate([task], ev.make_agent("null"), cfg)
  assert not null["passed"] and null["grade_failure_mode"] == "none", null["detail"]
