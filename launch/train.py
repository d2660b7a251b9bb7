r"""Train (or resume) an experiment.

  python -m launch.train --config=configs/demo.py --workdir=/tmp/demo [--config.loop.steps=40]

`--config` is an ml_collections config file whose `get_config()` mirrors
`rl.experiment.Experiment` (every field can be overridden with `--config.<path>=<value>`);
running again with the same `--workdir` resumes from its latest checkpoint. SIGTERM saves a
checkpoint at the next step boundary and exits. Writes under WORKDIR: checkpoints/,
trajectories/ + batches/ (Parquet), metrics.jsonl, events.jsonl, tb/, plots/, summary.json.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (resumed if it has checkpoints).")


def _convert(tp, value, path: str):
  """A config value -> the field type `tp` (dataclasses recursively, lists -> tuples)."""
  if dataclasses.is_dataclass(tp):
    return from_config(tp, value, path)
  origin = typing.get_origin(tp)
  if origin in (typing.Union, types.UnionType):
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return None if value is None else _convert(args[0], value, path)
  if origin is tuple and isinstance(value, (list, tuple)):
    args = typing.get_args(tp)
    inner = args[0] if args and (len(args) == 2 and args[1] is Ellipsis) else None
    return tuple(
      _convert(inner, v, f"{path}[{i}]") if inner else _plain(v) for i, v in enumerate(value)
    )
  if tp is float and isinstance(value, int) and not isinstance(value, bool):
    return float(value)
  return _plain(value)


def _plain(v):
  if isinstance(v, list):
    return tuple(_plain(x) for x in v)
  return v


def from_config(cls, config, path: str = "config"):
  """Builds the frozen dataclass `cls` from a ConfigDict/dict; unknown keys are errors."""
  data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
  hints = typing.get_type_hints(cls)
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(data) - names)
  if unknown:
    raise ValueError(
      f"{path}: unknown field(s) {unknown} of {cls.__name__}; known: {sorted(names)}"
    )
  kwargs = {k: _convert(hints[k], v, f"{path}.{k}") for k, v in data.items()}
  try:
    return cls(**kwargs)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{path}: {e}") from e


def to_experiment(config):
  from rl.experiment import Experiment

  return from_config(Experiment, config)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from rl import experiment

  exp = to_experiment(_CONFIG.value)
  logging.info("experiment: %s", exp)
  summary = experiment.run(exp, _WORKDIR.value)
  print(json.dumps({k: v for k, v in summary.items() if k != "train_pass_rate"}, indent=1))


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)
