"""Resume with a changed config: refused (the record untouched) unless overridden (old kept)."""

import dataclasses
import json

import pytest

from rl.config import Experiment, LoopConfig
from rl.runtime.run import ConfigChanged, config_diff, record_experiment


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


def test_a_record_with_a_retired_field_resumes(tmp_path):
  """An experiment.json written while train.loss.temperature existed (equal to
  agent.temperature, as the config check then required) resumes without a change."""
  exp = Experiment()
  old = dataclasses.asdict(exp)
  old["train"]["loss"]["temperature"] = exp.agent.temperature
  (tmp_path / "experiment.json").write_text(json.dumps(old))
  record_experiment(tmp_path, exp, True, False, print)  # no ConfigChanged
  assert config_diff(old, exp) == {}
