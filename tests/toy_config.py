"""configs/toy.py as an rl.config.Experiment, for tests that build or train the toy run."""

import importlib.util
import pathlib

from rl.config import to_experiment

ROOT = pathlib.Path(__file__).resolve().parents[1]


def toy_experiment():
  spec = importlib.util.spec_from_file_location("toy", ROOT / "configs" / "toy.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return to_experiment(mod.get_config())
