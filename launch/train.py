r"""Train (or resume) an experiment.

  python -m launch.train --config=configs/demo.py --workdir=/tmp/demo [--config.loop.steps=40]

`--config` is an ml_collections config file whose `get_config()` mirrors
`rl.rl_config.Experiment` (every field can be overridden with `--config.<path>=<value>`);
running again with the same `--workdir` resumes from its latest checkpoint. SIGTERM saves a
checkpoint at the next step boundary and exits. Writes under WORKDIR: checkpoints/,
trajectories/ + batches/ (Parquet), metrics.jsonl, events.jsonl, tb/, plots/, summary.json.
"""

from __future__ import annotations

import json

from absl import app, flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defined on use (not at import), so the library functions here import cleanly anywhere."""
  config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py).")
  flags.DEFINE_string("workdir", None, "Run directory (resumed if it has checkpoints).")
  flags.DEFINE_string(
    "compilation_cache",
    "~/.cache/agentrl/jax",
    "Persistent XLA compilation cache (a re-run skips compiling); '' disables. "
    "$JAX_COMPILATION_CACHE_DIR, when set, wins.",
  )
  flags.mark_flags_as_required(["config", "workdir"])
  from parallel import distributed

  distributed.define_flags()  # --coordinator, --num_processes, --process_id, ... (multi-host)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  import os

  import jax

  from parallel import distributed
  from rl import config as rl_config
  from rl.runtime import run as rl_run

  # Joins a multi-host job (flags or AGENTRL_*/JAX_* variables) before any device is used;
  # a no-op for a single process.
  distributed.initialize_from_flags_or_env()
  if FLAGS.compilation_cache and not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(FLAGS.compilation_cache))

  exp = rl_config.to_experiment(FLAGS.config)
  logging.info("experiment: %s", exp)
  summary = rl_run.run(exp, FLAGS.workdir)
  print(json.dumps({k: v for k, v in summary.items() if k != "train_pass_rate"}, indent=1))


if __name__ == "__main__":
  define_flags()
  app.run(main)
