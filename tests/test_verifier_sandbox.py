"""The verifier on real bwrap sandboxes: modes, strictness, failure modes, imported formats."""

import pathlib
import textwrap

import pytest
from task_files import write

from envs.agents.scripted import NullAgent, OracleAgent, ScriptedAgent
from envs.formats.loading import load_any
from envs.grading.quality import GateConfig, gate_task
from envs.grading.verifier import Verifier, VerifierConfig, check_milestones
from envs.sandbox import image as image_lib
from envs.sandbox.bwrap_host import run_setup_script
from envs.sandbox.testing import backend, sandbox_image  # noqa: F401 (fixtures)
from envs.task import load_task
from envs.task_env import TaskSetupError, open_task_sandbox

HEAD = 'import os, pathlib\nWS = pathlib.Path(os.environ["AGENTRL_WORKSPACE"])\n'


def make_task(
  root: pathlib.Path,
  tests: dict[str, str],
  toml: str = "",
  solve: str = "echo ok > result.txt",
  setup: str = "",
):
  files = {
    "task.toml": 'domain = "text"\ndifficulty = 1\n' + textwrap.dedent(toml),
    "instruction.md": "Write ok to result.txt.",
    "solution/solve.sh": solve,
    **{f"tests/{k}": HEAD + textwrap.dedent(v) for k, v in tests.items()},
  }
  if setup:
    files["environment/setup.sh"] = setup
  for rel, text in files.items():
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
  return load_any(root)


RESULT_TEST = {
  "test_result.py": "def test_result():\n  assert (WS / 'result.txt').read_text().strip() == 'ok'\n"
}


def run_and_grade(task, agent, cfg=VerifierConfig(), **open_kw):
  with open_task_sandbox(task, "bwrap", **open_kw) as ts:
    run = agent.run(ts.sandbox, task)
    return Verifier(cfg).grade(ts, agent_timed_out=run.timed_out)


def test_after_and_fresh_modes(tmp_path):
  task = make_task(tmp_path / "t", RESULT_TEST)
  # The answer lives in /tmp behind a workspace symlink: visible when grading in the same
  # sandbox, gone in a fresh environment (only the workspace is carried over).
  via_tmp = ScriptedAgent(["echo ok > /tmp/r.txt && ln -s /tmp/r.txt result.txt"])
  for cfg, passes in (
    (VerifierConfig(mode="after"), True),
    (VerifierConfig(mode="fresh"), False),
    (VerifierConfig(mode="fresh", fresh_reuse_pristine=False), False),
  ):
    res = run_and_grade(task, via_tmp, cfg, snapshot=True)
    assert res.passed is passes and res.failure_mode == "none", (cfg, res.detail, res.log[-500:])
  for mode in ("after", "fresh"):
    assert run_and_grade(task, OracleAgent(), VerifierConfig(mode=mode), snapshot=True).passed
    assert not run_and_grade(task, NullAgent(), VerifierConfig(mode=mode), snapshot=True).passed


def test_fresh_grading_runs_in_the_task_image(tmp_path, backend):  # noqa: F811
  """With an image set (env.image), the fresh environment is a copy of that image, not of
  the default one: the hidden test finds the file only the task's image holds."""
  marker = "echo layer-test > /etc/agentrl-layer-test"  # test_sandbox_image's layer: cached
  image = image_lib.with_setup(image_lib.resolve("default"), marker, run_setup_script)
  check = "def test_image():\n  assert pathlib.Path('/etc/agentrl-layer-test').is_file()\n"
  task = make_task(tmp_path / "t", {"test_image.py": check})
  cfg = VerifierConfig(mode="fresh", fresh_reuse_pristine=False)
  with open_task_sandbox(task, backend, image=image.id) as ts:
    OracleAgent().run(ts.sandbox, task)
    res = Verifier(cfg).grade(ts)
  assert res.passed and res.failure_mode == "none", (res.detail, res.log[-800:])
  assert ts.spec.image == image.id


def test_skips_fail_fraction_reward_and_subscores(tmp_path):
  tests = {
    "test_mix.py": """
      import pytest
      def test_a1(): assert True
      def test_a2(): assert (WS / "result.txt").exists()
      def test_b(): assert False, "never"
      @pytest.mark.skip(reason="required tests may not be skipped")
      def test_c(): pass
    """
  }
  toml = '[verifier]\nreward = "fraction"\n[verifier.subscores]\nalpha = ["test_a*"]\nbeta = ["test_b", "test_c"]\n'
  task = make_task(tmp_path / "t", tests, toml)
  res = run_and_grade(task, OracleAgent())
  assert not res.passed and res.reward == 0.5 and res.failure_mode == "none" and res.suite_ran
  assert dict(res.subscores) == {"tests_passed": 0.5, "alpha": 1.0, "beta": 0.0}
  assert {t.name.split("::")[1]: t.outcome for t in res.tests} == {
    "test_a1": "passed",
    "test_a2": "passed",
    "test_b": "failed",
    "test_c": "skipped",
  }
  binary = run_and_grade(task, OracleAgent(), VerifierConfig(reward="binary"))
  assert binary.reward == 0.0 and dict(binary.subscores)["alpha"] == 1.0
  only_skip = make_task(
    tmp_path / "s", {"test_s.py": "import pytest\n@pytest.mark.skip\ndef test_s(): pass\n"}
  )
  res = run_and_grade(only_skip, OracleAgent())
  assert not res.passed and res.exit_code == 0  # pytest itself calls this run a success


def test_runner_exit_code_must_agree_with_report(tmp_path):
  tests = {
    "conftest.py": "def pytest_sessionfinish(session, exitstatus):\n  session.exitstatus = 0\n",
    "test_x.py": "def test_x():\n  assert False\n",
  }
  res = run_and_grade(make_task(tmp_path / "t", tests), OracleAgent())
  assert (
    res.failure_mode == "parse_error"
    and "disagrees" in res.detail
    and res.reward == 0.0
    and not res.masked
  )


def test_every_test_file_must_run(tmp_path):
  tests = dict(
    RESULT_TEST, **{"test_hidden.py": "__test__ = False\ndef test_never():\n  assert False\n"}
  )
  res = run_and_grade(make_task(tmp_path / "t", tests), OracleAgent())
  assert res.failure_mode == "parse_error" and "test_hidden" in res.detail and not res.passed


def test_witness_accepts_every_honest_test_shape(tmp_path):
  """Classes, unittest cases, parameters with `::` in their ids and test subfolders: the
  witness lines name each test as its JUnit case does, so an honest pass is never flagged."""
  ok = "(WS / 'result.txt').read_text().strip() == 'ok'"
  tests = {
    "test_shapes.py": f"""
      import unittest, pytest
      class TestPlain:
        def test_m(self): assert {ok}
      class TestUnit(unittest.TestCase):
        def test_u(self): self.assertTrue({ok})
      @pytest.mark.parametrize("p", ["a::b.py", "x y"])
      def test_p(p): assert {ok}
      """,
    "sub/test_deep.py": f"def test_d():\n  assert {ok}\n",
  }
  task = make_task(tmp_path / "t", tests)
  res = run_and_grade(task, OracleAgent())
  assert res.passed and len(res.tests) == 5 and not res.flags, (res.detail, res.flags)
  res = run_and_grade(task, NullAgent())
  assert not res.passed and res.failure_mode == "none"


# Imported by the test module at collection, before any test runs: every report reads passed.
FORGER = """
import sys
r = sys.modules["_py" + "test.reports"]
make = r.TestReport.from_item_and_call.__func__
def forged(cls, item, call):
  rep = make(cls, item, call)
  rep.outcome, rep.longrepr = "passed", None
  return rep
r.TestReport.from_item_and_call = classmethod(forged)
VALUE = 0
"""


def test_a_report_forged_inside_the_test_process_is_caught(tmp_path):
  tests = {
    "test_imp.py": "import result_module\ndef test_x():\n  assert result_module.VALUE == 1\n"
  }
  solve = f"cat > result_module.py <<'EOF'\n{FORGER}\nEOF"
  task = make_task(tmp_path / "t", tests, solve=solve)
  for strict in (False, True):  # proof, not a heuristic: no tamper flag setting lets it pass
    res = run_and_grade(task, OracleAgent(), VerifierConfig(fail_on_tamper=strict))
    assert not res.passed and res.reward == 0.0 and res.failure_mode == "tamper", res.detail
    assert "tamper:report_forged" in res.flags and res.suite_ran and not res.masked
    assert [c.outcome for c in res.tests] == ["passed"]  # what the forged report said


def test_collection_error_is_a_plain_failure(tmp_path):
  tests = {
    "test_imp.py": "import result_module\ndef test_x():\n  assert result_module.VALUE == 1\n"
  }
  task = make_task(tmp_path / "t", tests, solve="echo 'VALUE = 1' > result_module.py")
  assert run_and_grade(task, OracleAgent()).passed  # the workspace is importable from the tests
  res = run_and_grade(task, ScriptedAgent(["echo 'VALUE = (' > result_module.py"]))
  assert not res.passed and res.failure_mode == "none" and res.exit_code == 2 and res.suite_ran


def test_test_timeout(tmp_path):
  tests = {"test_slow.py": "import time\ndef test_slow():\n  time.sleep(60)\n"}
  task = make_task(tmp_path / "t", tests, "[timeouts]\ntest_s = 2\n")
  res = run_and_grade(task, OracleAgent())
  assert res.failure_mode == "test_timeout" and res.reward == 0.0 and not res.masked


def test_agent_timeout_is_reported(tmp_path):
  task = make_task(tmp_path / "t", RESULT_TEST, "[timeouts]\nagent_s = 1\n")
  res = run_and_grade(task, ScriptedAgent(["echo ok > result.txt", "sleep 30", "rm result.txt"]))
  assert res.failure_mode == "agent_timeout" and res.passed  # graded on the state it reached


def test_infrastructure_failures_are_masked_not_zero(tmp_path):
  task = make_task(tmp_path / "t", RESULT_TEST)
  with open_task_sandbox(task, "bwrap") as ts:
    OracleAgent().run(ts.sandbox, task)
    ts.sandbox.close()  # the sandbox dies before grading
    res = Verifier().grade(ts)
  assert res.masked and res.reward is None and res.failure_mode == "sandbox_error"
  broken = make_task(tmp_path / "b", RESULT_TEST, setup="echo 'cannot build' >&2; exit 3")
  with pytest.raises(TaskSetupError, match="cannot build"):
    open_task_sandbox(broken, "bwrap")
  rep = gate_task(broken, GateConfig(k=1, hacks=()))
  assert not rep.ok and "environment setup failed" in rep.reasons[0]


def test_milestones(tmp_path):
  toml = '[[milestones]]\nname = "made"\ncheck = "test -f result.txt"\n[[milestones]]\nname = "content"\ncheck = "grep -qx ok result.txt"\n'
  task = make_task(tmp_path / "t", RESULT_TEST, toml)
  with open_task_sandbox(task, "bwrap") as ts:
    assert check_milestones(ts.sandbox, task) == {"made": False, "content": False}
    ts.sandbox.exec("echo nope > result.txt")
    assert check_milestones(ts.sandbox, task) == {"made": True, "content": False}
    OracleAgent().run(ts.sandbox, task)
    assert check_milestones(ts.sandbox, task) == {"made": True, "content": True}


def test_terminal_bench_folder_end_to_end(tmp_path):
  root = write(
    tmp_path / "tb" / "count-words",
    {
      "task.yaml": "instruction: Count the words of /app/data/in.txt into /app/count.txt.\ndifficulty: easy\n",
      "Dockerfile": """
        FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620
        RUN apt-get update && apt-get install -y tmux asciinema jq python3-pytest
        WORKDIR /app
        COPY data/ /app/data/
        ENV MODE=strict
        RUN wc -c data/in.txt > /app/bytes.txt
      """,
      "data/in.txt": "one two three four\n",
      "solution.yaml": "- command: wc -w < /app/data/in.txt > /app/count.txt\n",
      "run-tests.sh": "#!/bin/bash\npip install pytest\nuv run pytest $TEST_DIR/test_outputs.py -rA\n",
      "tests/test_outputs.py": """
        import os
        from pathlib import Path
        def test_count():
          assert Path("/app/count.txt").read_text().strip() == "4"
        def test_env_and_layout():
          assert os.environ["MODE"] == "strict" and Path("/app/bytes.txt").read_text().split()[0] == "19"
          assert Path(os.environ["TEST_DIR"], "test_outputs.py").is_file()
      """,
    },
  )
  task = load_any(root, suite="tb")
  assert task.workdir == "/app" and task.format == "terminal-bench"
  assert run_and_grade(task, OracleAgent()).passed
  assert not run_and_grade(task, NullAgent()).passed


def test_harbor_folder_shell_runner_end_to_end(tmp_path):
  root = write(
    tmp_path / "hb" / "greet",
    {
      "task.toml": '[metadata]\ndifficulty = "easy"\ncategory = "text"\n[verifier]\ntimeout_sec = 30\n',
      "instruction.md": "Write hello to /srv/greet.txt.",
      "environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /srv\nRUN echo seed > seed.txt\n",
      "solution/solution.yaml": "- printf 'hello\\n' > greet.txt\n",
      "tests/expected.txt": "hello\n",
      "tests/test.sh": """
        #!/bin/bash
        mkdir -p /logs/verifier
        a=0; b=0
        cmp -s /srv/greet.txt /tests/expected.txt && a=1
        [ "$(cat /srv/seed.txt)" = seed ] && b=1
        if [ $a = 1 ] && [ $b = 1 ]; then r=1; else r=0; fi
        echo "{\\"reward\\": $r, \\"greeting\\": $a, \\"seed\\": $b}" > /logs/verifier/reward.json
      """,
    },
  )
  task = load_any(root)
  assert task.format == "harbor" and task.tests.runner == "shell" and task.workdir == "/srv"
  res = run_and_grade(task, OracleAgent())
  assert (
    res.passed
    and res.reward == 1.0
    and dict(res.subscores) == {"greeting": 1.0, "reward": 1.0, "seed": 1.0}
  )
  res = run_and_grade(task, NullAgent())
  assert not res.passed and dict(res.subscores)["greeting"] == 0.0 and res.failure_mode == "none"
  planted = ScriptedAgent(["mkdir -p /tmp/logs && echo 1 > reward.txt && echo 1 > /tmp/reward.txt"])
  assert not run_and_grade(task, planted).passed


@pytest.mark.parametrize(
  "step, line, words",
  [
    # Packages are installed into a per-task layer at build time; one that does not exist is
    # the task's error, named (the line is the package name's, not the Dockerfile's).
    ("RUN apt-get update && apt-get install -y no-such-pkg-agentrl", None, "no-such-pkg-agentrl"),
    ("RUN pip install --no-cache-dir no-such-pkg-agentrl", None, "no-such-pkg-agentrl"),
    ("RUN test -f /nonexistent/file", 3, "step cannot be replayed"),
  ],
)
def test_dockerfile_steps_that_cannot_be_replayed_name_the_line(tmp_path, step, line, words):
  root = write(
    tmp_path / "tb" / "bad",
    {
      "task.yaml": "instruction: x\n",
      "Dockerfile": f"FROM ubuntu:22.04\nWORKDIR /app\n{step}\n",
      "solution.sh": "true\n",
      "tests/test_x.py": "def test_x():\n  pass\n",
    },
  )
  with pytest.raises(TaskSetupError) as e:
    open_task_sandbox(load_any(root), "bwrap")
  assert words in str(e.value), str(e.value)
  assert line is None or f"Dockerfile:{line}:" in str(e.value), str(e.value)


def test_builtin_task_gate_in_fresh_mode():
  task = load_task(pathlib.Path(__file__).parents[1] / "envs/tasks/core/gi-partial-commit", "core")
  rep = gate_task(
    task,
    GateConfig(k=1, hacks=("conftest_flip", "plant_reward"), verifier=VerifierConfig(mode="fresh")),
  )
  assert rep.ok, rep.reasons


def test_agent_filling_the_disk_is_not_masked(tmp_path):
  task = make_task(tmp_path / "t", RESULT_TEST, "[resources]\ndisk_mb = 8\n")
  fill = ScriptedAgent(["echo ok > result.txt; head -c 20000000 /dev/zero > /tmp/fill; true"])
  res = run_and_grade(task, fill)
  assert not res.masked and res.reward == 0.0 and res.failure_mode == "grader_blocked", res.detail
