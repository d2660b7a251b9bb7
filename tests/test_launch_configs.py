"""Every config file parses into an Experiment, documents its command, and overrides work."""

import dataclasses
import importlib
import importlib.util
import pathlib

import ml_collections
import pytest

from launch import sweep
from models.sampling import SamplingParams
from rl.config import Experiment, LossConfig, from_config, to_experiment

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.stem for p in (ROOT / "configs").glob("*.py") if p.stem != "__init__")


def _config_module(name: str):
  """configs/<name>.py by its path: the test does not depend on the working directory."""
  spec = importlib.util.spec_from_file_location(f"configs.{name}", ROOT / "configs" / f"{name}.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


@pytest.mark.parametrize("name", CONFIGS)
def test_config_parses_validates_and_documents_its_command(name):
  mod = _config_module(name)
  exp = to_experiment(mod.get_config())
  assert isinstance(exp, Experiment)
  exp.validate()
  assert f"python -m launch.train --config=configs/{name}.py --workdir=" in mod.__doc__


def test_overrides_and_type_conversion():
  c = _config_module("toy").get_config()
  c.train.optim.lr = 1  # an int where a float is expected
  c.train.rules = ["vocab="]
  c.loop.mode = "async"
  exp = to_experiment(c)
  assert exp.train.optim.lr == 1.0 and isinstance(exp.train.optim.lr, float)
  assert exp.train.rules == ("vocab=",) and exp.loop.mode == "async" and exp.loop.staleness == 1
  assert dataclasses.is_dataclass(exp.model.rope_scaling)


def test_bad_config_errors_name_the_field():
  c = ml_collections.ConfigDict({"loss": {"advantage": "grpo", "bogus": 1}})
  with pytest.raises(ValueError, match=r"config\.loss: unknown field\(s\) \['bogus'\]"):
    from_config(_Wrap, c)
  with pytest.raises(ValueError, match=r"config: .*is_mode.*'nope'"):
    from_config(LossConfig, {"is_mode": "nope"})
  c = _config_module("toy").get_config()
  c.loop.mode = "sideways"
  with pytest.raises(ValueError, match="config.loop: LoopConfig.mode"):
    to_experiment(c)


def test_agent_temperature_is_the_one_setting():
  """The loss has no temperature of its own (agent.temperature owns it, rl.train_step gets it
  from the host); rollouts a loss cannot score are refused; the retired field reads only when
  it agrees with its owner (experiment.json files written before it was retired)."""
  c = _config_module("toy").get_config()
  c.agent.temperature = 0.7
  exp = to_experiment(c)
  exp.validate()  # one setting: nothing on the loss side to keep equal
  assert exp.agent.sampling(seed=3) == SamplingParams(temperature=0.7, seed=3)
  assert "temperature" not in {f.name for f in dataclasses.fields(LossConfig)}
  for field, bad, words in (("top_k", 20, "top_k 20"), ("temperature", 0.0, "temperature 0.0")):
    bad_c = _config_module("toy").get_config()
    setattr(bad_c.agent, field, bad)
    with pytest.raises(ValueError, match=words):
      to_experiment(bad_c).validate()
  stored = dataclasses.asdict(exp)
  stored["train"]["loss"]["temperature"] = 0.7
  assert to_experiment(stored, "experiment.json") == exp
  stored["train"]["loss"]["temperature"] = 1.0
  with pytest.raises(ValueError, match=r"experiment.json.train.loss.temperature: retired.*0.7"):
    to_experiment(stored, "experiment.json")


@dataclasses.dataclass(frozen=True)
class _Wrap:
  loss: LossConfig = LossConfig()


def test_sweep_grid_expansion_and_commands(tmp_path):
  grid = sweep.parse_grid(["train.optim.lr=1e-3,3e-3", "rollout.group_size=4,8"])
  combos = sweep.combinations(grid)
  assert combos == [
    {"train.optim.lr": "1e-3", "rollout.group_size": "4"},
    {"train.optim.lr": "1e-3", "rollout.group_size": "8"},
    {"train.optim.lr": "3e-3", "rollout.group_size": "4"},
    {"train.optim.lr": "3e-3", "rollout.group_size": "8"},
  ]
  assert sweep.run_name(combos[1]) == "lr=1e-3,group_size=8"
  cmd = sweep.command("configs/toy.py", tmp_path / "r", combos[0])
  assert cmd[1:4] == ["-m", "launch.train", "--config=configs/toy.py"]
  assert "--config.train.optim.lr=1e-3" in cmd
  with pytest.raises(ValueError, match="expected key=v1,v2"):
    sweep.parse_grid(["lr"])
