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
    # Every registry / enum name, before the warm start (issue 38.2).
    ("--config.train.loss.advantage=foo", "train.loss.advantage: 'foo' is not one of"),
    ("--config.train.loss.policy_loss=ppp", "train.loss.policy_loss: 'ppp' is not one of"),
    ("--config.train.loss.kl=k4", "train.loss.kl: 'k4' is not one of k1, k2, k3, none"),
    ("--config.train.loss.aggregation=sum", "train.loss.aggregation: 'sum' is not one of"),
    ("--config.env.verifier_mode=later", "env.verifier_mode: 'later' is not one of"),
    ("--config.env.tasks=procedural:echo_wrd", "did you mean 'echo_word'?"),
    ("--config.env.tasks=mixed:echo_word+nosuite<=2", "'nosuite' is not one of"),
    # A path with a section left out, a flag with no value (issue 38.3).
    (
      "--config.optim.lr=1",
      "--config.optim.lr: unknown config field; did you mean --config.train.optim.lr?",
    ),  # fmt: skip
    ("--config.loop.steps", "--config.loop.steps: no value given (write --config.loop.steps="),
  ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_train_errors_are_one_line_before_the_workdir(tmp_path, override, cause, dry_run):
  wd = tmp_path / "run"
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/toy.py", f"--workdir={wd}"]
  cmd += ["--dry_run"] if dry_run else []
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


@pytest.mark.parametrize(
  "script, args, cause",
  [
    ("launch.eval", ["--tasks=no/such", "--out={out}"], "is neither a folder nor a built-in"),
    ("launch.check_tasks", ["--tasks=no/such", "--out={out}"], "--tasks: no/such: no such"),
    ("launch.generate_demo", ["--checkpoint=no/such"], "no/such: no such checkpoint folder"),
    ("launch.serve", ["--checkpoint=no/such"], "no/such"),
    ("launch.build_image", ["--backends=podman"], "--backends: 'podman' is not one of"),
    (
      "launch.sweep",
      ["--config=configs/toy.py", "--workdir={out}", "--grid=loop.stepz=1,2"],
      "unknown config field(s) loop.stepz",
    ),  # fmt: skip
  ],
)
def test_every_script_reports_one_line_and_creates_nothing(tmp_path, script, args, cause):
  out = tmp_path / "out"
  cmd = [sys.executable, "-m", script, *(a.format(out=out) for a in args)]
  p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
  assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
  last = p.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and cause in last, p.stderr[-2000:]
  assert not out.exists()


def test_dry_run_lists_every_field_with_its_default(tmp_path):
  wd = tmp_path / "run"
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/toy.py", f"--workdir={wd}"]
  p = subprocess.run(cmd + ["--dry_run"], capture_output=True, text=True, cwd=ROOT, timeout=300)
  assert p.returncode == 0, p.stderr[-2000:]
  import dataclasses

  from rl.config import Experiment
  from rl.runtime.run import flat_config

  fields = flat_config(dataclasses.asdict(Experiment()))
  listed = [ln.split()[0] for ln in p.stdout.splitlines() if ln.startswith("  --config.")]
  assert listed == [f"--config.{k}" for k in fields]
  assert "--config.loop.steps" in p.stdout and "(default " in p.stdout
  assert p.stdout.strip().splitlines()[-1].startswith("ok: config, tasks")
  assert not wd.exists()
