r"""A grid of config overrides -> one training run each -> a results table and a plot.

  python -m launch.sweep --config=configs/toy.py --workdir=/tmp/sweep \
      --grid=train.optim.lr=3e-4,1e-3 --grid=rollout.group_size=4,8 [--set=loop.steps=20]

Every combination of the `--grid` values runs `python -m launch.train` in its own process and
workdir (`WORKDIR/<name>`), `--set` overrides apply to all runs. A run that already finished
(its summary.json exists, without "preempted": true) is not run again, so a sweep can be resumed. Results:
WORKDIR/results.csv, WORKDIR/results.md (one row per run: overrides, final and best eval /
train pass rate, steps, wall time) and WORKDIR/results.png (pass-rate curves of every run).
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import pathlib
import re
import subprocess
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  flags.DEFINE_string("config", None, "Config file (configs/*.py), as for launch.train.")
  flags.DEFINE_string("workdir", None, "Sweep directory; one sub-directory per run.")
  flags.DEFINE_multi_string("grid", [], "key=v1,v2,... (a config path and its values).")
  flags.DEFINE_multi_string("set", [], "key=value applied to every run.")
  flags.DEFINE_integer("parallel", 1, "Runs at once.")
  flags.mark_flags_as_required(["config", "workdir"])


def parse_grid(specs: list[str]) -> list[tuple[str, list[str]]]:
  out = []
  for spec in specs:
    key, sep, values = spec.partition("=")
    if not sep or not key or not values:
      raise ValueError(f"--grid {spec!r}: expected key=v1,v2,...")
    out.append((key.strip(), [v.strip() for v in values.split(",")]))
  return out


def combinations(grid: list[tuple[str, list[str]]]) -> list[dict[str, str]]:
  keys = [k for k, _ in grid]
  return [dict(zip(keys, vals, strict=True)) for vals in itertools.product(*(v for _, v in grid))]


def run_name(overrides: dict[str, str]) -> str:
  if not overrides:
    return "base"
  parts = [f"{k.split('.')[-1]}={v}" for k, v in overrides.items()]
  return re.sub(r"[^A-Za-z0-9_.=,-]", "_", ",".join(parts))


def command(config: str, workdir: pathlib.Path, overrides: dict[str, str]) -> list[str]:
  return [
    sys.executable,
    "-m",
    "launch.train",
    f"--config={config}",
    f"--workdir={workdir}",
    *[f"--config.{k}={v}" for k, v in overrides.items()],
  ]


def _result(run_dir: pathlib.Path, overrides: dict, wall_s: float, rc: int) -> dict:
  from rl.runtime.telemetry import read_metrics, series

  row = {"run": run_dir.name, **overrides, "returncode": rc, "wall_s": round(wall_s, 1)}
  summary = run_dir / "summary.json"
  if summary.exists():
    s = json.loads(summary.read_text())
    row.update(step=s["step"], eval_first=s["eval_first"], eval_last=s["eval_last"])
  recs = read_metrics(run_dir)
  for key, name in (("pass_rate/overall", "train_pass"), ("eval/pass_rate/overall", "eval_pass")):
    _, v = series(recs, key)
    if len(v):
      row[f"{name}_last"] = round(float(v[-1]), 4)
      row[f"{name}_best"] = round(float(v.max()), 4)
  return row


def finished(run_dir: pathlib.Path) -> bool:
  """A run that ended (summary.json), not one stopped early (`"preempted": true`): that one
  is run again, which resumes it."""
  try:
    return not json.loads((run_dir / "summary.json").read_text()).get("preempted")
  except (OSError, ValueError):
    return False


def check_fields(config: str, keys) -> None:
  """Every overridden key names a field of the config (before any run starts)."""
  import dataclasses

  from rl.config import Experiment
  from rl.runtime.run import flat_config

  fields = set(flat_config(dataclasses.asdict(Experiment())))
  bad = [k for k in keys if k not in fields]
  if bad:
    raise ValueError(f"{config}: unknown config field(s) {', '.join(bad)} (see --dry_run)")


def finished_line(row: dict, done: int, total: int) -> str:
  """One console line for a finished run: result, pass rates, wall time."""
  if row["returncode"]:
    return f"[sweep {done}/{total}] {row['run']}: FAILED (exit {row['returncode']}, see train.log)"
  parts = [f"[sweep {done}/{total}] {row['run']}: done in {row['wall_s']:.0f} s"]
  for name, label in (("train_pass", "train pass"), ("eval_pass", "held-out pass")):
    if f"{name}_last" in row:
      parts.append(f"{label} last {row[f'{name}_last']:.2f} best {row[f'{name}_best']:.2f}")
  return ", ".join(parts)


def run_sweep(config: str, workdir: str, grid, common: dict[str, str], parallel: int = 1):
  """Runs every combination; returns the result rows (also written as csv/md/png)."""
  check_fields(config, [*common, *(k for k, _ in grid)])
  root = pathlib.Path(workdir)
  root.mkdir(parents=True, exist_ok=True)
  jobs = []
  for combo in combinations(grid):
    run_dir = root / run_name(combo)
    jobs.append((run_dir, combo, command(config, run_dir, {**common, **combo})))
  rows, running = [], []
  env = dict(os.environ)
  env.setdefault("JAX_COMPILATION_CACHE_DIR", str(root / ".jax_cache"))
  pending = list(jobs)
  while pending or running:
    while pending and len(running) < parallel:
      run_dir, combo, cmd = pending.pop(0)
      if finished(run_dir):
        rows.append(_result(run_dir, combo, 0.0, 0))
        print(f"[sweep {len(rows)}/{len(jobs)}] {run_dir.name}: finished before, skipped")
        continue
      run_dir.mkdir(parents=True, exist_ok=True)
      log = open(run_dir / "train.log", "w")
      print(f"[sweep] {run_dir.name}: {' '.join(cmd[1:])}", flush=True)
      running.append(
        (
          subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env),
          run_dir,
          combo,
          time.monotonic(),
          log,
        )
      )
    for item in list(running):
      proc, run_dir, combo, t0, log = item
      if proc.poll() is not None:
        log.close()
        running.remove(item)
        rows.append(_result(run_dir, combo, time.monotonic() - t0, proc.returncode))
        print(finished_line(rows[-1], len(rows), len(jobs)), flush=True)
    time.sleep(0.2)
  rows.sort(key=lambda r: [j[0].name for j in jobs].index(r["run"]))
  write_results(root, rows, [j[0] for j in jobs])
  return rows


def write_results(root: pathlib.Path, rows: list[dict], run_dirs) -> None:
  cols = list(dict.fromkeys(k for r in rows for k in r))
  with open(root / "results.csv", "w", newline="") as f:
    w = csv.DictWriter(f, cols)
    w.writeheader()
    w.writerows(rows)
  lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
  (root / "results.md").write_text("\n".join(lines) + "\n")
  _plot(root, run_dirs)


def _plot(root: pathlib.Path, run_dirs) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  from rl.runtime.telemetry import read_metrics, series

  fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
  for d in run_dirs:
    recs = read_metrics(d)
    for ax, key in zip(axes, ("pass_rate/overall", "eval/pass_rate/overall"), strict=True):
      s, v = series(recs, key)
      if len(s):
        ax.plot(s, v, marker=".", label=d.name)
  for ax, title in zip(axes, ("train pass rate", "held-out pass rate"), strict=True):
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if ax.lines:
      ax.legend(fontsize=7)
    else:  # say why rather than leave a blank panel
      ax.text(0.5, 0.5, "no data in these runs\n(held-out eval needs env.eval_tasks > 0)",
              ha="center", va="center", transform=ax.transAxes)  # fmt: skip
  fig.tight_layout()
  fig.savefig(root / "results.png", dpi=90)
  plt.close(fig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  common = dict(kv.split("=", 1) for kv in FLAGS.set)
  rows = run_sweep(FLAGS.config, FLAGS.workdir, parse_grid(FLAGS.grid), common, FLAGS.parallel)
  print((pathlib.Path(FLAGS.workdir) / "results.md").read_text())
  if any(r["returncode"] for r in rows):
    sys.exit(1)


if __name__ == "__main__":
  from launch import cli

  define_flags()
  cli.run(main)
