"""launch.eval end to end (a subprocess, real bwrap sandboxes): --filter then --sample pick
the tasks, exit status 0 on a clean run, 3 when trials stay masked after --retries, 1 with a
one-line error when nothing is left to evaluate."""

import fnmatch
import json
import os
import pathlib
import subprocess
import sys

from envs import eval as ev

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _eval(out, *args, env=None):
  cmd = [sys.executable, "-m", "launch.eval", "--tasks=core", "--agent=oracle", f"--out={out}"]
  return subprocess.run(
    cmd + list(args), cwd=ROOT, capture_output=True, text=True, timeout=600, env=env
  )


def test_filter_then_sample_and_a_clean_exit(tmp_path):
  p = _eval(tmp_path, "--filter=core/bu-*", "--sample=2", "--seed=3")
  assert p.returncode == 0, p.stderr[-2000:]
  trials = json.loads((tmp_path / "results.json").read_text())["trials"]
  bu = [t for t in ev.resolve_tasks("core") if fnmatch.fnmatchcase(t.id, "core/bu-*")]
  want = sorted(t.id for t in ev.sample_tasks(bu, 2, 3))
  assert sorted(t["task_id"] for t in trials) == want and len(want) == 2
  assert all(t["passed"] and t["attempts"] == 1 for t in trials)  # the reference solution
  assert "trials: 100%" in p.stderr and "2/2" in p.stderr and "passed 2/2" in p.stderr  # the bar
  md = (tmp_path / "summary.md").read_text()
  assert md.startswith("# Evaluation summary\n\npass@1 **1.000** over 2 tasks"), md[:300]
  assert "## Legend" in md and "- **pass@1**: " in md
  assert "<h2>Legend</h2>" in (tmp_path / "report.html").read_text()


def test_masked_trials_after_retries_exit_3(tmp_path):
  # Docker pointed at a socket nobody serves: every attempt is a sandbox (infra) error.
  env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock")
  p = _eval(
    tmp_path / "ev", "--filter=core/bu-pipefail", "--backend=docker", "--retries=1", env=env
  )
  assert p.returncode == 3, p.stderr[-2000:]
  (t,) = json.loads((tmp_path / "ev" / "results.json").read_text())["trials"]
  assert t["masked"] and t["failure_mode"] == "sandbox_error" and t["attempts"] == 2


def test_nothing_left_to_evaluate_is_a_usage_error(tmp_path):
  p = _eval(tmp_path, "--filter=no-such-task-*")
  assert p.returncode == 2  # a usage error (cli.run), before anything is written
  assert "--filter='no-such-task-*': no task" in p.stderr
  assert not (tmp_path / "results.json").exists()
