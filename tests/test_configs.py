"""Every experiment config in configs/ builds a valid Experiment, and its docstring holds the
command that runs it."""

import importlib.util
import pathlib

import pytest

from rl import config as rl_config

CONFIGS = sorted((pathlib.Path(__file__).resolve().parents[1] / "configs").glob("*.py"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_builds_a_valid_experiment(path):
  spec = importlib.util.spec_from_file_location(f"cfg_{path.stem}", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  exp = rl_config.to_experiment(mod.get_config())
  exp.validate()
  assert f"--config=configs/{path.name}" in (mod.__doc__ or ""), path.name
  assert exp.loop.row_len >= exp.engine.max_seq_len, path.name
  assert exp.model.max_seq_len >= exp.engine.max_seq_len, path.name


def test_configs_found():
  assert {p.stem for p in CONFIGS} >= {"demo", "toy"}
