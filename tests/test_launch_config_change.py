"""Resume with a changed config: refused (the record untouched) unless overridden (old kept);
a model-shape change refused even then, in one line, the workdir unchanged."""

import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest
from toy_config import toy_experiment

from rl.config import Experiment, LoopConfig
from rl.runtime.run import ConfigChanged, config_diff, record_experiment

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_changed_config_is_refused_unless_overridden(tmp_path):
  said = []
  a = Experiment()
  b = dataclasses.replace(a, loop=dataclasses.replace(a.loop, steps=a.loop.steps + 5))
  record_experiment(tmp_path, a, False, False, said.append)
  before = (tmp_path / "experiment.json").read_text()
  record_experiment(tmp_path, a, True, False, said.append)  # same config: fine, no note
  assert said == [] and (tmp_path / "experiment.json").read_text() == before
  with pytest.raises(ConfigChanged, match="loop.steps: .* -> .*--override_config"):
    record_experiment(tmp_path, b, True, False, said.append)
  assert (tmp_path / "experiment.json").read_text() == before
  record_experiment(tmp_path, b, True, True, said.append)
  assert (tmp_path / "experiment-1.json").read_text() == before
  assert len(said) == 1 and "loop.steps" in said[0]
  assert config_diff({}, Experiment(loop=LoopConfig())) != {}


def test_a_model_shape_change_is_refused_even_with_override(tmp_path):
  said = []
  a = toy_experiment()
  b = dataclasses.replace(a, model=dataclasses.replace(a.model, d_model=128))
  record_experiment(tmp_path, a, False, False, said.append)
  before = (tmp_path / "experiment.json").read_bytes()
  want = "model shape changed: model.d_model 96 -> 128; these weights cannot be restored"
  with pytest.raises(ConfigChanged, match=want):
    record_experiment(tmp_path, b, True, True, said.append)
  assert (tmp_path / "experiment.json").read_bytes() == before
  assert sorted(p.name for p in tmp_path.iterdir()) == ["experiment.json"] and said == []
  # A run-time model field (remat) keeps the shapes: allowed with --override_config.
  c = dataclasses.replace(a, model=dataclasses.replace(a.model, remat="full"))
  record_experiment(tmp_path, c, True, True, said.append)
  assert len(said) == 1 and "model.remat" in said[0]


def test_a_refused_resume_is_one_line_and_changes_nothing(tmp_path):
  wd = tmp_path / "run"
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/toy.py", f"--workdir={wd}"]
  cmd += ["--config.sft.steps=0", "--config.loop.steps=1", "--config.loop.batch_groups=1",
          "--config.rollout.group_size=2", "--config.loop.checkpoint_every=1"]  # fmt: skip
  p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
  assert p.returncode == 0, p.stderr[-3000:]
  log = (wd / "log.txt").read_text()  # the console's output, then the libraries' INFO lines
  assert "wall time: " in log and "RL steps: 100%" in log and " INFO " in log, log[-3000:]
  assert log.index("wall time: ") > log.index("RL steps: 100%")
  files = {f: f.read_bytes() for f in wd.rglob("*") if f.is_file()}
  more = ["--config.loop.steps=2", "--config.model.d_model=128", "--override_config"]
  p = subprocess.run(cmd + more, capture_output=True, text=True, cwd=ROOT, timeout=900)
  assert p.returncode == 2, p.stderr[-3000:]
  want = "model shape changed: model.d_model 96 -> 128; these weights cannot be restored"
  assert p.stderr.strip().splitlines() == [f"error: {want} (traceback in {wd / 'log.txt'})"]
  after = {f: f.read_bytes() for f in wd.rglob("*") if f.is_file()}
  assert after.keys() - files.keys() == set()
  changed = [f for f in files if after.get(f) != files[f] and f.name != "log.txt"]
  assert changed == [], changed
  assert f"error: {want}" in (wd / "log.txt").read_text()


def test_a_record_with_a_retired_field_resumes(tmp_path):
  """An experiment.json written while train.loss.temperature existed (equal to
  agent.temperature, as the config check then required) resumes without a change."""
  exp = Experiment()
  old = dataclasses.asdict(exp)
  old["train"]["loss"]["temperature"] = exp.agent.temperature
  (tmp_path / "experiment.json").write_text(json.dumps(old))
  record_experiment(tmp_path, exp, True, False, print)  # no ConfigChanged
  assert config_diff(old, exp) == {}
