r"""A grid of config overrides -> one training run each -> a results table and a plot.

  python -m launch.sweep --config=configs/toy.py --workdir=/tmp/sweep \
      --grid=train.optim.lr=3e-4,1e-3 --grid=rollout.group_size=4,8 [--set=loop.steps=20]

Every combination of the `--grid` values runs `python -m launch.train` in its own process and
workdir (`WORKDIR/<name>`), `--set` overrides apply to all runs. A run that already finished
(its summary.json exists, without "preempted": true) is not run again, so a sweep can be resumed. Results:
WORKDIR/results.csv, WORKDIR/results.md (one row per run: overrides, final and best eval /
train pass rate, steps, wall time) and WORKDIR/results.png (pass-rate curves of every run).

Named arms (`--arm=name:key=value,key=value`, crossed with the grid) compare different recipes
in one sweep; `--eval=CMD` runs CMD (its `{workdir}` replaced by the run's folder, writing
`{workdir}/eval`, e.g. `launch.eval --checkpoint={workdir} --out={workdir}/eval`) after each run
finishes, then WORKDIR/compare.md and compare.png (launch.compare_evals) hold pass@k per run and
family. A run counts as finished once both its summary.json and its eval exist. In a value,
`{sweep}` is the sweep directory: arms that start from an earlier arm's run (listed first; runs
go in order with --parallel=1) name it `checkpoint={sweep}/warm`, one warm start for all.

  python -m launch.sweep --config=configs/smollm2_nodemo.py --workdir=/tmp/nodemo \
      --arm=warm:loop.steps=0 --arm=grpo:loop.seed=0 --arm=rft:loop.algorithm=rft \
      --eval="python -m launch.eval ... --checkpoint={workdir} --out={workdir}/eval"
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
  flags.DEFINE_multi_string(
    "arm", [], "name:key=value,key=value,... one named run (crossed with --grid) per --arm."
  )
  flags.DEFINE_string(
    "eval", None, "Shell command run after each finished run, {workdir} replaced by the run's "
    "folder; it writes {workdir}/eval (launch.eval --out). Then compare.md/.png compare them.",
  )  # fmt: skip
  flags.DEFINE_string(
    "sets", "", "Named sets of families for compare.md/.png (launch.compare_evals --sets), e.g. "
    "N=read_note+find_ext,U=rename_ext.",
  )  # fmt: skip
  flags.mark_flags_as_required(["config", "workdir"])


def parse_grid(specs: list[str]) -> list[tuple[str, list[str]]]:
  out = []
  for spec in specs:
    key, sep, values = spec.partition("=")
    if not sep or not key or not values:
      raise ValueError(f"--grid {spec!r}: expected key=v1,v2,...")
    out.append((key.strip(), [v.strip() for v in values.split(",")]))
  return out


def parse_arms(specs: list[str]) -> list[tuple[str, dict[str, str]]]:
  """`name:key=value,key=value` per spec -> [(name, overrides)] (no spec: one unnamed arm)."""
  out = []
  for spec in specs:
    name, sep, body = spec.partition(":")
    pairs = [kv for kv in body.split(",") if kv.strip()]
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or any("=" not in kv for kv in pairs):
      raise ValueError(f"--arm {spec!r}: expected name:key=value,key=value,...")
    out.append((name, dict(kv.strip().split("=", 1) for kv in pairs)))
  if len({n for n, _ in out}) != len(out):
    raise ValueError(f"--arm: two arms share a name ({[n for n, _ in out]})")
  return out or [("", {})]


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


def run_sweep(
  config: str, workdir: str, grid, common: dict[str, str], parallel: int = 1, arms=None,
  eval_cmd: str | None = None, sets: str = "",
):  # fmt: skip
  """Runs every arm x combination (then `eval_cmd` on each); returns the result rows (also
  written as csv/md/png, and compare.md/png of the evals)."""
  arms = arms or [("", {})]
  check_fields(config, [*common, *(k for k, _ in grid), *(k for _, a in arms for k in a)])
  root = pathlib.Path(workdir)
  root.mkdir(parents=True, exist_ok=True)
  jobs = plan(config, root, grid, common, arms)
  rows, running = [], []
  env = dict(os.environ)
  env.setdefault("JAX_COMPILATION_CACHE_DIR", str(root / ".jax_cache"))
  pending = list(jobs)
  while pending or running:
    while pending and len(running) < parallel:
      run_dir, combo, cmd = pending.pop(0)
      if finished(run_dir) and (not eval_cmd or _evaluated(run_dir)):
        rows.append(_result(run_dir, combo, 0.0, 0))
        print(f"[sweep {len(rows)}/{len(jobs)}] {run_dir.name}: finished before, skipped")
        continue
      run_dir.mkdir(parents=True, exist_ok=True)
      if (run_dir / "summary.json").exists():  # trained before; only its eval is missing
        cmd = None
      running.append([_start(run_dir, cmd, eval_cmd, env), run_dir, combo, time.monotonic()])
    for item in list(running):
      (proc, log, phase), run_dir, combo, t0 = item
      if proc.poll() is None:
        continue
      log.close()
      if phase == "train" and proc.returncode == 0 and eval_cmd:
        item[0] = _start(run_dir, None, eval_cmd, env)
        continue
      running.remove(item)
      rows.append(_result(run_dir, combo, time.monotonic() - t0, proc.returncode))
      print(finished_line(rows[-1], len(rows), len(jobs)), flush=True)
    time.sleep(0.2)
  rows.sort(key=lambda r: [j[0].name for j in jobs].index(r["run"]))
  write_results(root, rows, [j[0] for j in jobs])
  if eval_cmd:
    compare_runs(root, [j[0] for j in jobs], sets)
  return rows


def plan(config: str, root: pathlib.Path, grid, common: dict[str, str], arms) -> list[tuple]:
  """[(run folder, label, launch.train command)] per arm x grid combination, in order; `{sweep}`
  in a value becomes the sweep folder (absolute)."""
  jobs = []
  for arm, over in arms:
    for combo in combinations(grid):
      name = ",".join(x for x in (arm, run_name(combo) if combo or not arm else "") if x)
      run_dir, label = root / name, {**({"arm": arm} if arm else {}), **combo}
      values = {
        k: v.replace("{sweep}", str(root.resolve())) for k, v in {**common, **over, **combo}.items()
      }
      jobs.append((run_dir, label, command(config, run_dir, values)))
  return jobs


def _evaluated(run_dir: pathlib.Path) -> bool:
  return (run_dir / "eval" / "results.json").is_file()


def _start(run_dir: pathlib.Path, cmd, eval_cmd, env):
  """(process, log, phase): the training run (`cmd`), or with `cmd` None the eval command."""
  if cmd is not None:
    log = open(run_dir / "train.log", "a")
    print(f"[sweep] {run_dir.name}: {' '.join(cmd[1:])}", flush=True)
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log, "train"
  line = eval_cmd.replace("{workdir}", str(run_dir))
  log = open(run_dir / "eval.log", "a")
  print(f"[sweep] {run_dir.name} eval: {line}", flush=True)
  return (
    subprocess.Popen(line, shell=True, stdout=log, stderr=subprocess.STDOUT, env=env),
    log,
    "eval",
  )


def compare_runs(root: pathlib.Path, run_dirs, sets: str = "") -> None:
  """compare.md and compare.png (launch.compare_evals) over the runs' evals that exist; `sets`
  as compare_evals' --sets (a column and a plot panel each)."""
  from launch import compare_evals

  runs = {d.name: compare_evals.load(str(d / "eval")) for d in run_dirs if _evaluated(d)}
  if not runs:
    return
  named = compare_evals.parse_sets(sets)
  ks, curves, lines = compare_evals.compare(runs, "family", named)
  (root / "compare.md").write_text("\n".join(lines) + "\n")
  compare_evals.plot(ks, curves, str(root / "compare.png"), tuple(named) or ("all",))


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
  rows = run_sweep(
    FLAGS.config, FLAGS.workdir, parse_grid(FLAGS.grid), common, FLAGS.parallel,
    parse_arms(FLAGS.arm), FLAGS.eval, FLAGS.sets,
  )  # fmt: skip
  print((pathlib.Path(FLAGS.workdir) / "results.md").read_text())
  compare = pathlib.Path(FLAGS.workdir) / "compare.md"
  if compare.exists():
    print(compare.read_text())
  if any(r["returncode"] for r in rows):
    sys.exit(1)


if __name__ == "__main__":
  from launch import cli

  define_flags()
  cli.run(main)
