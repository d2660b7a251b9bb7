r"""Train (or resume) an experiment.

  python -m launch.train --config=configs/demo.py --workdir=/tmp/demo [--config.loop.steps=40]
  python -m launch.train --config=configs/toy.py --workdir=/tmp/x --dry_run   # check, list fields

`--config` is an ml_collections config file whose `get_config()` mirrors
`rl.config.Experiment` (every field can be overridden with `--config.<path>=<value>`);
running again with the same `--workdir` resumes from its latest checkpoint ("resumed from step
N of M"; a finished run says "already complete"). A changed config is refused on resume unless
--override_config. Ctrl-C (or SIGTERM) saves a checkpoint at the next step boundary and exits;
a second Ctrl-C aborts; the exit status is then 130. Writes under WORKDIR: log.txt (library logs), checkpoints/,
trajectories/ + batches/ (Parquet), metrics.jsonl, events.jsonl, tb/, plots/, summary.json.
Known errors print one line and exit 2 (--verbose: with the traceback).
"""

from __future__ import annotations

import json
import shlex
import sys

from absl import flags
from ml_collections import config_flags

FLAGS = flags.FLAGS
EXIT_INTERRUPTED = 130  # a run stopped by Ctrl-C / SIGTERM (saved; resumable): what shells expect


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
  flags.DEFINE_bool("dry_run", False, "Check paths, backend and mesh, list the config; no run.")
  flags.DEFINE_bool("print_config", False, "Same as --dry_run.")
  flags.DEFINE_bool("override_config", False, "Resume a workdir even if the config changed.")
  flags.mark_flags_as_required(["config", "workdir"])
  from parallel import distributed

  distributed.define_flags()  # --coordinator, --num_processes, --process_id, ... (multi-host)


def config_table(exp) -> str:
  """Every --config.* field: its value, and the default when the value differs."""
  import dataclasses

  from rl import config as rl_config
  from rl.runtime.run import flat_config

  plain = lambda e: flat_config(json.loads(json.dumps(dataclasses.asdict(e), default=str)))
  cur, default = plain(exp), plain(rl_config.Experiment())
  width = max(map(len, cur))
  rows = []
  for k, v in cur.items():
    note = "" if v == default.get(k) else f"   (default {default.get(k)!r})"
    shown = repr(v) if len(repr(v)) < 70 else repr(v)[:66] + "...'"
    rows.append(f"  --config.{k:<{width}} = {shown}{note}")
  return "\n".join(rows)


def main(argv):
  from absl import app

  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  import os
  import pathlib

  import jax

  from launch import cli
  from parallel import distributed
  from rl import config as rl_config
  from rl.runtime import run as rl_run

  # Joins a multi-host job (flags or AGENTRL_*/JAX_* variables) before any device is used;
  # a no-op for a single process.
  distributed.initialize_from_flags_or_env()
  if FLAGS.compilation_cache and not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(FLAGS.compilation_cache))

  exp = rl_config.to_experiment(FLAGS.config)
  rl_run.preflight(exp)  # before the workdir exists: a bad config leaves nothing behind
  if FLAGS.dry_run or FLAGS.print_config:
    print(config_table(exp))
    print(f"ok: config, tasks ({exp.env.tasks}), backend ({exp.env.backend}) and mesh checked")
    return 0
  wd = pathlib.Path(FLAGS.workdir)
  cli.log_to(wd / "log.txt")
  summary = rl_run.run(exp, FLAGS.workdir, override_config=FLAGS.override_config)
  # The machine-readable summary (scripts and tests parse this block), then the people's one.
  print(json.dumps({k: v for k, v in summary.items() if k != "train_pass_rate"}, indent=1))
  print(final_summary(summary, exp))
  return EXIT_INTERRUPTED if summary.get("preempted") else 0


def final_summary(summary: dict, exp) -> str:
  """The end of a run: pass rate first -> last, eval, wall time, where things are."""
  wd = summary.get("workdir", FLAGS.workdir)
  cmd = shlex.join(["python", "-m", "launch.train", *sys.argv[1:]])
  if summary.get("already_complete"):
    return f"nothing to do; to train longer: {cmd} --config.loop.steps=N --override_config"
  lines = []
  if summary.get("in_warm_start"):
    return f"stopped in the warm start (saved in {wd}/warm_start); resume with:\n  {cmd}"
  if summary.get("preempted"):
    lines.append(f"stopped at step {summary['step']} of {exp.loop.steps}; resume with:\n  {cmd}")
  train = summary.get("train_pass_rate") or []
  if train:
    lines.append(f"train pass rate: {train[0][1]:.2f} (step {train[0][0]}) -> "
                 f"{train[-1][1]:.2f} (step {train[-1][0]})")  # fmt: skip
  if summary.get("evals"):
    ev = ", ".join(f"step {s}: {r:.2f}" for s, r in summary["evals"])
    lines.append(f"held-out eval pass rate: {ev}")
  if "wall_s" in summary:
    lines.append(f"wall time: {summary['wall_s']:.0f} s, {summary['step']} steps")
  lines.append(
    f"in {wd}: plots/ ({len(summary.get('plots', []))} PNG), metrics.jsonl, "
    "trajectories/ (Parquet), checkpoints/, log.txt; export: "
    f"python -m launch.export --workdir={wd} --out=DIR"
  )
  return "\n".join(lines)


if __name__ == "__main__":
  from launch import cli

  define_flags()
  cli.run(lambda argv: sys.exit(main(argv)))
