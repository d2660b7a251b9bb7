"""Terminal-Bench and Harbor task folders, written here, evaluated end to end (translated
Dockerfile, offline pytest or test.sh reward file) with the oracle, null and scripted agents,
through the library and through `launch.eval`."""

import json
import pathlib
import subprocess
import sys
import textwrap

from envs import eval as ev
from envs import flywheel
from envs.loading import load_any, load_tasks

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


def _write(root: pathlib.Path, files: dict) -> pathlib.Path:
  for rel, text in files.items():
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip("\n"))
  return root


def _suite(tmp_path):
  _write(tmp_path / "ext" / "tb-sum", TB)
  _write(tmp_path / "ext" / "hb-port", HARBOR)
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
