"""launch scripts: known errors are one line on stderr, exit 2, and leave no workdir behind."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
  "override, cause",
  [
    ("--config.loop.stepz=3", "--config.loop.stepz: unknown config field"),
    ("--config.env.backend=podman", "env.backend: 'podman' is not one of"),
    ("--config.env.tasks=no/such/tasks", "env.tasks: no/such/tasks: no such folder"),
  ],
)
def test_train_errors_are_one_line_before_the_workdir(tmp_path, override, cause):
  wd = tmp_path / "run"
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/toy.py", f"--workdir={wd}"]
  out = subprocess.run(cmd + [override], capture_output=True, text=True, cwd=ROOT, timeout=300)
  assert out.returncode == 2, out.stderr[-2000:]
  lines = out.stderr.strip().splitlines()
  assert lines[-1].startswith("error: ") and cause in lines[-1], out.stderr[-2000:]
  assert "Traceback" not in out.stderr
  assert not wd.exists()


def test_export_of_a_missing_run_is_one_line(tmp_path):
  cmd = [sys.executable, "-m", "launch.export", f"--workdir={tmp_path}", f"--out={tmp_path}/o"]
  out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
  assert out.returncode == 2 and "Traceback" not in out.stderr
  assert "experiment.json" in out.stderr.strip().splitlines()[-1] or "no checkpoint" in out.stderr
