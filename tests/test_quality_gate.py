"""The quality gate on real bwrap sandboxes: every built-in task passes; bad tasks are caught.

On every built-in task the reference solution passes and the no-op agent fails; one task of each
domain also runs k=2 reference runs (the CLI default is 3) and the whole hack battery, one sandbox
per task reused through snapshot/restore, 2 tasks at a time.
"""

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

from envs import procedural
from envs.formats.loading import load_any, load_tasks
from envs.grading.hacks import HACKS
from envs.grading.quality import GateConfig, Quarantine, RunRecord, _judge, check_tasks, gate_task
from envs.task import BUILTIN_DIR
from envs.task_pool import PoolConfig, TaskPool

REPO = pathlib.Path(__file__).parents[1]


def make(
  root: pathlib.Path, name: str, test: str, solve: str = "echo ok > out.txt", setup: str = ""
):
  d = root / name
  files = {
    "task.toml": 'domain = "text"\ndifficulty = 1\n[timeouts]\ntest_s = 30\n',
    "instruction.md": "Write ok to out.txt.",
    "solution/solve.sh": solve,
    "tests/test_out.py": 'import os, pathlib\nWS = pathlib.Path(os.environ["AGENTRL_WORKSPACE"])\n'
    + textwrap.dedent(test),
  }
  if setup:
    files["environment/setup.sh"] = setup
  for rel, text in files.items():
    (d / rel).parent.mkdir(parents=True, exist_ok=True)
    (d / rel).write_text(text)
  return d


STRICT = "def test_out():\n  assert (WS / 'out.txt').read_text() == 'ok\\n'\n"


@pytest.fixture
def bad_suite(tmp_path_factory):
  root = tmp_path_factory.mktemp("suite") / "bad"
  make(root, "good", STRICT)
  make(
    root, "weak", "def test_out():\n  assert (WS / 'out.txt').exists() or True\n"
  )  # no-op passes
  make(root, "wrong-solution", STRICT, solve="echo ko > out.txt")
  make(
    root,
    "reward-file",
    "def test_out():\n  assert (WS / 'out.txt').exists() or (pathlib.Path('/tmp/reward.txt').exists())\n",
  )
  return root


def test_gate_catches_bad_tasks_and_quarantines_them(bad_suite, tmp_path):
  tasks = load_tasks(bad_suite)
  q = Quarantine(tmp_path / "quarantine.json")
  cfg = GateConfig(k=2, hacks=("plant_reward", "conftest_flip"), concurrency=2)
  reports = {r.task_id: r for r in check_tasks(tasks, cfg, q)}
  assert reports["bad/good"].ok and "bad/good" not in q
  assert "no-op agent passes" in q.reason("bad/weak")
  assert "reference solution passed 0/2" in q.reason("bad/wrong-solution")
  assert "hack:plant_reward passes" in q.reason("bad/reward-file")
  # Every pool honours the quarantine file.
  pool = TaskPool(tasks, PoolConfig(seed=0, quarantine_path=str(q.path)))
  assert {pool.sample().id for _ in range(200)} == {"bad/good"}
  # A task fixed later passes the gate again and is released from the gate's quarantine.
  make(bad_suite, "weak", STRICT)
  check_tasks([t for t in load_tasks(bad_suite) if t.id == "bad/weak"], cfg, q)
  assert "bad/weak" not in q and "bad/wrong-solution" in q


def test_repeated_runs_must_agree():
  def run(agent, passed, reward=None):
    return RunRecord(
      agent, passed, float(passed) if reward is None else reward, "none", "", (), 0.0, 0.0
    )

  flaky = [run("oracle", True), run("oracle", False), run("oracle", True), run("null", False)]
  reasons, infra = _judge(flaky, GateConfig())
  assert infra is None and "repeated reference runs disagree (flaky task)" in reasons
  assert "reference solution passed 2/3" in reasons[0]
  noisy_noop = [run("oracle", True), run("null", False, 0.0), run("null", False, 0.5)]
  assert _judge(noisy_noop, GateConfig())[0] == ["repeated no-op runs disagree (flaky task)"]
  clean = [run("oracle", True), run("oracle", True), run("null", False), run("hack:x", False)]
  assert _judge(clean, GateConfig()) == ([], None)
  masked = clean + [RunRecord("hack:y", False, None, "sandbox_error", "died", (), 0.0, 0.0)]
  reasons, infra = _judge(masked, GateConfig())
  assert reasons == [] and "sandbox_error" in infra  # infrastructure never quarantines a task


def test_check_tasks_cli(bad_suite, tmp_path):
  out = tmp_path / "report.json"
  q = tmp_path / "q.json"
  cmd = [
    sys.executable,
    "-m",
    "launch.check_tasks",
    f"--tasks={bad_suite}",
    "--k=1",
    "--hacks=plant_reward",
  ]
  cmd += [f"--report={out}", f"--quarantine={q}", "--only=good,weak"]
  r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
  assert r.returncode == 1, r.stderr[-2000:]
  lines = r.stdout.splitlines()
  assert lines[0].split()[:5] == ["task", "verdict", "oracle", "noop", "hacks"]
  row = {ln.split()[0]: ln.split() for ln in lines[2:4]}
  assert row["bad/good"][1:5] == ["PASS", "1/1", "fails", "1/1"] and row["bad/weak"][1:4] == [
    "FAIL",
    "1/1",
    "PASSES",
  ]
  rep = json.loads(out.read_text())
  assert (
    rep["passed"] == 1
    and rep["total"] == 2
    and {t["task_id"] for t in rep["tasks"]} == {"bad/good", "bad/weak"}
  )
  assert list(json.loads(q.read_text())["tasks"]) == ["bad/weak"]


def _one_per_domain(tasks):
  """The first task (by id) of each domain: a fixed, stratified sample."""
  first = {}
  for t in sorted(tasks, key=lambda t: t.id):
    first.setdefault(t.domain, t)
  return list(first.values())


@pytest.mark.parametrize("suite,count", [("core", 73), ("long_horizon", 16)])
def test_every_builtin_task_passes_the_gate(suite, count):
  """Every task: the reference solution passes and the no-op agent fails. The whole hack
  battery (k=2) runs on one task of each domain here; `python -m launch.check_tasks
  --tasks=envs/tasks` runs it on every task (16 runs a task: ~12 min for core on 2 cores)."""
  tasks = load_tasks(BUILTIN_DIR / suite)
  folders = sorted(p.parent.name for p in (BUILTIN_DIR / suite).glob("*/task.toml"))
  assert len(tasks) == len(folders) == count, (len(tasks), len(folders))  # none lost or added
  sample = _one_per_domain(tasks)
  assert len(sample) >= (7 if suite == "core" else 1)
  rest = [t for t in tasks if t not in sample]
  reports = check_tasks(rest, GateConfig(k=1, hacks=(), concurrency=2))
  reports += check_tasks(sample, GateConfig(k=2, concurrency=2))
  assert {r.task_id for r in reports} == {t.id for t in tasks}
  failed = {r.task_id: r.infra_error or r.reasons for r in reports if not r.ok}
  assert not failed, failed
  for r in reports:  # every run of the gate was graded (none masked) and every hack ran
    full = any(r.task_id == t.id for t in sample)
    assert len(r.runs) == (2 + 1 + len(HACKS) if full else 1 + 1)
    assert all(x.reward is not None for x in r.runs)


def test_procedural_tasks_pass_the_gate():
  tasks = [procedural.generate(f, seed) for seed, f in enumerate(procedural.FAMILIES)]
  hacks = (
    "plant_reward",
    "conftest_flip",
    "sabotage_pytest",
  )  # the full battery runs on the core suite
  reports = check_tasks(tasks, GateConfig(k=1, hacks=hacks, concurrency=2))
  assert all(r.ok for r in reports), {r.task_id: r.reasons for r in reports if not r.ok}


def test_gate_on_imported_formats(tmp_path):
  root = tmp_path / "tb" / "upper"
  files = {
    "task.yaml": "instruction: Upper-case /app/in.txt into /app/out.txt.\ndifficulty: easy\n",
    "Dockerfile": "FROM python:3.12-slim-bookworm\nWORKDIR /app\nCOPY in.txt /app/in.txt\n",
    "in.txt": "abc\n",
    "solution.sh": "tr a-z A-Z < /app/in.txt > /app/out.txt\n",
    "tests/test_outputs.py": "from pathlib import Path\ndef test_out():\n  assert Path('/app/out.txt').read_text() == 'ABC\\n'\n",
  }
  for rel, text in files.items():
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)
  rep = gate_task(load_any(root), GateConfig(k=1))
  assert rep.ok, rep.reasons


def _gate_cli(tmp_path, *args):
  cmd = [sys.executable, "-m", "launch.check_tasks", "--k=1", "--hacks=none", *args]
  cmd.append(f"--out={tmp_path / 'gate-out'}")
  return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_check_tasks_zero_tasks_is_an_error(bad_suite, tmp_path):
  r = _gate_cli(tmp_path, f"--tasks={tmp_path / 'missing'}")
  assert r.returncode == 2 and "no such task folder" in r.stderr and "Traceback" not in r.stderr
  assert len(r.stderr.strip().splitlines()) == 1, r.stderr
  r = _gate_cli(tmp_path, f"--tasks={bad_suite}", "--only=good,goood")
  assert r.returncode == 2 and "--only: no task named goood" in r.stderr, r.stderr
  empty = tmp_path / "empty"
  empty.mkdir()
  r = _gate_cli(tmp_path, f"--tasks={empty}")
  assert r.returncode == 2 and "no task found" in r.stderr, r.stderr


def test_check_tasks_broken_task_is_a_quarantined_failure(tmp_path):
  root = tmp_path / "tasks" / "s"
  make(root, "good", STRICT)
  broken = make(root, "broken", STRICT)
  (broken / "task.toml").write_text('domain = "text"\ndifficulty = [\n')
  out = tmp_path / "gate-out"
  r = _gate_cli(tmp_path, f"--tasks={root}")
  assert r.returncode == 1, r.stderr[-2000:]
  rep = json.loads((out / "check_tasks.json").read_text())
  verdicts = {t["task_id"]: t["ok"] for t in rep["tasks"]}
  assert verdicts == {"s/good": True, "s/broken": False}
  q = json.loads((out / "quarantine.json").read_text())["tasks"]
  assert list(q) == ["s/broken"] and "invalid TOML" in q["s/broken"]["reason"]
  assert not (root / "quarantine.json").exists()  # never into the task folder by default


def test_gate_outlives_a_sandbox_that_dies(tmp_path, monkeypatch):
  """The gate's sandbox lives as long as all of its runs (one episode's budget each: on a
  loaded machine twenty runs outlived one budget and the next restore found pid 1 gone), and a
  sandbox that dies anyway (killed here from the host after the no-op run, as an OOM kill
  would) is replaced by a fresh one for the runs left: the report is that of a healthy task."""
  import os
  import signal

  from envs.grading import quality

  task = load_any(make(tmp_path, "t", "def test_ok():\n  assert (WS / 'out.txt').exists()\n"))
  opened, real_open, real_play = [], quality.open_task_sandbox, quality.play

  def open_and_record(*a, **kw):
    ts = real_open(*a, **kw)
    opened.append(ts.spec.episode_timeout_s)
    return ts

  def play_then_kill(ts, agent, *a, **kw):
    out = real_play(ts, agent, *a, **kw)
    if agent.name == "null":
      os.kill(ts.sandbox.pid1, signal.SIGKILL)
    return out

  monkeypatch.setattr(quality, "open_task_sandbox", open_and_record)
  monkeypatch.setattr(quality, "play", play_then_kill)
  cfg = GateConfig(k=1, hacks=("plant_reward",))
  rep = gate_task(task, cfg)
  assert rep.ok and rep.infra_error is None, (rep.reasons, rep.infra_error)
  assert [r.agent for r in rep.runs] == ["oracle", "null", "hack:plant_reward"]
  per_run = quality.task_spec(task).episode_timeout_s
  assert opened == [3 * per_run, 3 * per_run]  # the first died after run 2: a second one
