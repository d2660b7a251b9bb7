"""Terminal-Bench and Harbor task folders, written here, evaluated end to end (translated
Dockerfile, offline pytest or test.sh reward file) with the oracle, null and scripted agents,
through the library and through `launch.eval`."""

import dataclasses
import json
import pathlib
import re
import subprocess
import sys

from task_files import write

from envs import eval as ev
from envs import flywheel
from envs.formats.loading import load_any, load_tasks

TB = {
  "task.yaml": """
    instruction: |
      The folder /app/data holds numbers.txt. Write their sum to /app/sum.txt and the
      largest one to /app/max.txt.
    difficulty: easy
    category: data
    tags: [shell, awk]
    max_agent_timeout_sec: 120
    max_test_timeout_sec: 60
  """,
  "Dockerfile": """
    FROM python:3.11-slim
    WORKDIR /app
    RUN apt-get update && apt-get install -y gawk && rm -rf /var/lib/apt/lists/*
    COPY data/ /app/data/
    ENV SCALE=1
  """,
  "data/numbers.txt": "4\n15\n8\n",
  "solution.yaml": """
    - command: awk '{s += $1} END {print s * ENVIRON["SCALE"]}' data/numbers.txt > sum.txt
    - command: sort -n data/numbers.txt | tail -n1 > max.txt
  """,
  "run-tests.sh": """
    #!/bin/bash
    curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
    uv run pytest $TEST_DIR/test_outputs.py -rA
  """,
  "tests/test_outputs.py": """
    from pathlib import Path

    def test_sum():
        assert Path("/app/sum.txt").read_text() == "27\\n"

    def test_max():
        assert Path("/app/max.txt").read_text() == "15\\n"
  """,
}

HARBOR = {
  "task.toml": """
    version = "1.0"
    [metadata]
    difficulty = "medium"
    category = "sysadmin"
    tags = ["config"]
    [verifier]
    timeout_sec = 60.0
    [agent]
    timeout_sec = 120.0
    [environment]
    cpus = 1
    memory = "512M"
  """,
  "instruction.md": "In /srv/svc/app.conf set `port=9090` (it says 8080) and create /srv/svc/READY.\n",
  "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /srv/svc\nCOPY conf/ ./\n",
  "environment/conf/app.conf": "name=svc\nport=8080\n",
  "solution/solve.sh": "sed -i 's/^port=8080$/port=9090/' app.conf\ntouch READY\n",
  "tests/test.sh": """
    #!/bin/bash
    if grep -qx 'port=9090' /srv/svc/app.conf && grep -qx 'name=svc' /srv/svc/app.conf && [ -f /srv/svc/READY ]; then
      echo 1 > /logs/verifier/reward.txt
    else
      echo 0 > /logs/verifier/reward.txt
    fi
  """,
}


def _suite(tmp_path):
  write(tmp_path / "ext" / "tb-sum", TB)
  write(tmp_path / "ext" / "hb-port", HARBOR)
  return tmp_path / "ext"


def test_oracle_passes_and_null_fails_on_both_formats(tmp_path):
  tasks = load_tasks(_suite(tmp_path))
  assert sorted(t.format for t in tasks) == ["harbor", "terminal-bench"]
  oracle = ev.evaluate(tasks, ev.make_agent("oracle"), ev.EvalConfig(concurrency=2))
  assert [(t["task_id"], t["passed"]) for t in oracle] == [(t.id, True) for t in tasks], [
    t["detail"] for t in oracle
  ]
  null = ev.evaluate(tasks, ev.make_agent("null"), ev.EvalConfig(concurrency=2))
  assert [t["passed"] for t in null] == [False, False]
  assert {t["grade_failure_mode"] for t in null} == {"none"}  # graded, not an infra error
  hb = next(t for t in oracle if t["format"] == "harbor")
  assert hb["subscores"] == {"reward": 1.0} and hb["checks"] is None


def test_scripted_agent_from_a_folder_of_command_files(tmp_path):
  tasks = load_tasks(_suite(tmp_path))
  scripts = tmp_path / "scripts" / "ext"
  scripts.mkdir(parents=True)
  (scripts / "tb-sum.txt").write_text(
    "echo 27 > sum.txt\n# a wrong answer for max\necho 8 > max.txt\n"
  )
  (scripts / "hb-port.json").write_text(
    json.dumps(["sed -i s/8080/9090/ app.conf", {"command": "touch READY"}])
  )
  trials = ev.evaluate(tasks, ev.script_agent(tmp_path / "scripts"), ev.EvalConfig())
  by_format = {t["format"]: t for t in trials}
  assert by_format["harbor"]["passed"] and by_format["harbor"]["turns"] == 2
  tb = by_format["terminal-bench"]
  assert not tb["passed"] and tb["turns"] == 2 and tb["failure_mode"] == "tests_failed"
  assert {t["name"].split("::")[-1]: t["outcome"] for t in tb["tests"]} == {
    "test_sum": "passed",
    "test_max": "failed",
  }
  assert [s["action"] for s in tb["trajectory"]] == ["echo 27 > sum.txt", "echo 8 > max.txt"]
  # the failure goes to the flywheel; an imported task's draft is a copy of its folder
  (row,) = flywheel.export_failures(trials, tasks, tmp_path / "fw")
  assert row["origin"] == tb["task_id"] and row["draft_format"] == "terminal-bench"
  draft = load_any(tmp_path / "fw" / row["folder"] / "task")
  assert (
    draft.format == "terminal-bench"
    and draft.tests == next(t for t in tasks if t.id == tb["task_id"]).tests
  )
  meta = json.loads((tmp_path / "fw" / row["folder"] / "task" / "flywheel.json").read_text())
  assert meta["failure_mode"] == "tests_failed" and "flywheel" in meta["tags"]


def test_launch_eval_scripted_on_terminal_bench(tmp_path):
  suite = _suite(tmp_path)
  script = tmp_path / "cmds.sh"
  script.write_text("awk '{s += $1} END {print s}' data/numbers.txt > sum.txt\necho 15 > max.txt\n")
  out = tmp_path / "out"
  cmd = [
    sys.executable, "-m", "launch.eval", f"--tasks={suite / 'tb-sum'}", "--agent=scripted",
    f"--script={script}", "--trials=2", f"--out={out}",
  ]  # fmt: skip
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  doc = json.loads((out / "results.json").read_text())
  assert [t["passed"] for t in doc["trials"]] == [True, True]
  assert doc["summary"]["overall"]["pass@k"] == {"1": 1.0, "2": 1.0}
  assert doc["summary"]["by_domain"]["data"]["pass@1"] == 1.0
  assert (out / "flywheel" / "failures.jsonl").read_text() == ""


# ------------------------------------------------ patterns of real TB1 / TB2 tasks (issue 17)

TB2_BASE = {  # Harbor: t-bench base (WORKDIR /app not repeated), tests/ inside environment/
  "task.toml": 'version = "1.0"\n[metadata]\ndifficulty = "easy"\ncategory = "text"\n',
  "instruction.md": "Write the lines of /app/input.txt, upper-cased, to /app/out.txt.\n",
  "environment/Dockerfile": """
    FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620
    RUN apt-get update && apt-get install -y python3 coreutils && rm -rf /var/lib/apt/lists/*
    COPY input.txt .
    COPY tests/suffix.txt ./suffix.txt
  """,
  "environment/input.txt": "ab\ncd\n",
  "environment/tests/suffix.txt": "!\n",
  "solution/solve.sh": "tr a-z A-Z < input.txt > out.txt\ncat suffix.txt >> out.txt\n",
  "tests/expected.txt": "AB\nCD\n!\n",
  "tests/test.sh": """
    #!/bin/bash
    apt-get update
    apt-get install -y curl
    curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
    source $HOME/.local/bin/env
    cp /tests/expected.txt /app/expected.txt
    export WANT=/app/expected.txt
    uvx \\
      --with pytest==8.4.1 \\
      --with pytest-json-ctrf==0.3.5 \\
      pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
    if [ $? -eq 0 ]; then
      echo 1 > /logs/verifier/reward.txt
    else
      echo 0 > /logs/verifier/reward.txt
    fi
  """,
  "tests/test_outputs.py": """
    import os
    from pathlib import Path

    def test_out():
        assert Path("/app/out.txt").read_text() == Path(os.environ["WANT"]).read_text()
  """,
}

TB1_COMPOSE = {  # TB1: compose service with a sub-folder Dockerfile, working_dir, environment
  "task.yaml": "instruction: Write $MODE and the data line to /app/result.txt.\ndifficulty: easy\n",
  "docker-compose.yaml": """
    services:
      client:
        build:
          context: .
          dockerfile: client/Dockerfile
        image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
        command: ["sh", "-c", "sleep infinity"]
        working_dir: /app
        environment:
          - TEST_DIR=${T_BENCH_TEST_DIR}
          - MODE=fast
        volumes:
          - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
  """,
  "client/Dockerfile": "FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest\nCOPY client/data.txt ./\n",
  "client/data.txt": "d1\n",
  "solution.sh": 'echo "$MODE $(cat data.txt)" > result.txt\n',
  "run-tests.sh": """
    #!/bin/bash
    if [ "$PWD" = "/" ]; then
        echo "Error: No working directory set. Please set a WORKDIR in your Dockerfile before running this script."
        exit 1
    fi
    uv venv .tbench-testing
    source .tbench-testing/bin/activate
    uv pip install pytest==8.4.1
    uv run pytest $TEST_DIR/test_outputs.py -rA
  """,
  "tests/test_outputs.py": """
    from pathlib import Path

    def test_result():
        assert Path("/app/result.txt").read_text() == "fast d1\\n"
  """,
}

ROOT_WRITES = {  # COPY outside the workspace: needs the container-like sandbox mode
  "task.toml": 'version = "1.0"\n[metadata]\ndifficulty = "easy"\n',
  "instruction.md": "Run /usr/local/bin/greet and save its output in /app/greeting.txt.\n",
  "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\nCOPY greet.sh /usr/local/bin/greet\n",
  "environment/greet.sh": "#!/bin/sh\necho hi\n",
  "solution/solve.sh": "greet > greeting.txt\n",
  "tests/test_outputs.py": "from pathlib import Path\ndef test_g():\n  assert Path('/app/greeting.txt').read_text() == 'hi\\n'\n",
}

MISSING_APT = {  # a package the image lacks: a task_error naming it (until the layer installs it)
  **TB2_BASE,
  "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\nRUN apt-get install -y dos2unix\n",
}


def _patterns(tmp_path) -> pathlib.Path:
  root = tmp_path / "real"
  write(root / "tb2-base", TB2_BASE)
  write(root / "tb1-compose", TB1_COMPOSE)
  write(root / "root-writes", ROOT_WRITES)
  # COPY keeps the build context's file mode (as Docker does): the script must be executable.
  (root / "root-writes" / "environment" / "greet.sh").chmod(0o755)
  write(root / "broken", {**TB2_BASE, "task.toml": "version = [\n"})
  return root


def test_translation_of_real_task_patterns(tmp_path):
  root = _patterns(tmp_path)
  tb2 = load_any(root / "tb2-base", "real")
  # a t-bench base brings its harness tools first (docker_bases.TBENCH_PACKAGES)
  assert tb2.workdir == "/app" and tb2.apt_packages[:5] == (
    "tmux",
    "asciinema",
    "curl",
    "python3",
    "coreutils",
  )
  assert tb2.tests.runner == "pytest" and "cp /tests/expected.txt" in tb2.tests.pre_script
  assert "export WANT" in tb2.tests.pre_script and not tb2.tests.post_script
  assert {f.path for f in tb2.tests.files} == {"expected.txt", "test_outputs.py"}
  assert any(f.path.endswith("suffix.txt") for f in tb2.setup_files)  # tests/ of the context
  tb1 = load_any(root / "tb1-compose", "real")
  assert tb1.workdir == "/app" and dict(tb1.env) == {"MODE": "fast"}
  assert tb1.tests.runner == "pytest" and tb1.tests.pre_script == ""
  assert load_any(root / "root-writes").sandbox_mode == "container"


def test_real_task_patterns_grade_like_their_harness(tmp_path):
  from envs.sandbox.base import SandboxSpec

  root = _patterns(tmp_path)
  tasks = [load_any(root / n, "real") for n in ("tb2-base", "tb1-compose", "root-writes")]
  tasks.append(load_any(write(root / "missing-apt", MISSING_APT), "real"))
  oracle = {t["task_id"]: t for t in ev.evaluate(tasks, ev.make_agent("oracle"), ev.EvalConfig())}
  null = {t["task_id"]: t for t in ev.evaluate(tasks, ev.make_agent("null"), ev.EvalConfig())}
  for tid in ("real/tb2-base", "real/tb1-compose"):
    assert oracle[tid]["passed"], oracle[tid]["detail"]
    assert not null[tid]["passed"] and not null[tid]["masked"], null[tid]["detail"]
  miss = oracle["real/missing-apt"]
  if "apt_packages" not in {f.name for f in dataclasses.fields(SandboxSpec)}:
    assert miss["failure_mode"] == "task_error" and "dos2unix" in miss["detail"], miss
  rw = oracle["real/root-writes"]
  if "mode" in {f.name for f in dataclasses.fields(SandboxSpec)}:
    assert rw["passed"], rw["detail"]  # the container-like sandbox: a writable root
  else:
    assert rw["failure_mode"] == "task_error" and "container" in rw["detail"], rw
    assert rw["attempts"] == 1  # a task error is not retried like an infrastructure error


def test_launch_eval_folder_with_a_broken_task(tmp_path):
  root = _patterns(tmp_path)
  out = tmp_path / "out"
  cmd = [
    sys.executable, "-m", "launch.eval", f"--tasks={root}", "--agent=oracle",
    "--filter=[bt]*", f"--out={out}",
  ]  # fmt: skip
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
  assert r.returncode == 4, r.stderr[-3000:]  # a task did not load: not a clean run
  last = r.stderr.strip().splitlines()[-1]
  assert last.startswith("error: 1 of 3 tasks did not load") and "exit status 4" in last, last
  assert "warning: load_error real/broken" in r.stderr, r.stderr[-3000:]
  assert not re.search(r"^[IWEF]\d{4} \d\d:", r.stderr, re.M), r.stderr[-3000:]  # absl's prefix
  doc = json.loads((out / "results.json").read_text())
  rows = {t["task_id"]: t for t in doc["trials"]}
  assert set(rows) == {"real/tb2-base", "real/tb1-compose", "real/broken"}  # filter on folders
  assert rows["real/broken"]["failure_mode"] == "load_error"
  assert "invalid TOML" in rows["real/broken"]["detail"]
  assert doc["summary"]["counts"] == {"trials": 3, "graded": 2, "task_error": 1, "infra": 0}
  assert doc["summary"]["overall"]["pass@1"] == 1.0 and doc["summary"]["pass@1_all"] == 2 / 3
  summary = (out / "summary.md").read_text()
  assert "1 task errors" in summary and "| real |" in summary  # the suite column is filled
  single = tmp_path / "out1"
  cmd = [sys.executable, "-m", "launch.eval", f"--tasks={root / 'tb1-compose'}", f"--out={single}"]
  assert subprocess.run(cmd, capture_output=True, text=True, timeout=600).returncode == 0
  assert json.loads((single / "results.json").read_text())["trials"][0]["suite"] == "real"
  cmd = [sys.executable, "-m", "launch.eval", f"--tasks={root}", "--filter=nope*", f"--out={out}"]
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
  assert r.returncode != 0 and "no task" in r.stderr
