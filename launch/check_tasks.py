r"""The environment quality gate over a folder of tasks.

  python -m launch.check_tasks --tasks=envs/tasks/core [--backend=bwrap|docker] [--k=3] \
      [--concurrency=2] [--hacks=all|none|name,name] [--mode=after|fresh] \
      [--out=DIR] [--report=PATH] [--quarantine=PATH] [--procedural=N] [--only=id,id]

For every task: the reference solution passes k of k runs, a no-op agent fails, every hack of
the battery fails, and repeated runs agree. A task that does not load (a broken task.toml) is a
failed task. Prints a table, writes a JSON report (default OUT/check_tasks.json), and puts
failing tasks into the quarantine file (default OUT/quarantine.json; pass it to a task pool's
`quarantine_path`). Exit code 0 when every task passed, 1 otherwise, 2 when nothing was
checked (a missing --tasks folder, an --only that matches no task).
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

from absl import app, flags

from envs import procedural
from envs.formats.loading import LoadError, load_suite
from envs.grading.hacks import HACKS_BY_NAME
from envs.grading.quality import GateConfig, Quarantine, TaskGateReport, check_tasks
from envs.grading.verifier import VerifierConfig
from launch.cli import LaunchError

FLAGS = flags.FLAGS
flags.DEFINE_string(
  "tasks", None, "Folder of tasks (any depth; our, Terminal-Bench or Harbor format)."
)
flags.DEFINE_enum("backend", "bwrap", ["bwrap", "docker"], "Sandbox backend.")
flags.DEFINE_string("image", "default", "Sandbox image.")
flags.DEFINE_integer("k", 3, "Reference-solution runs per task (all must pass).")
flags.DEFINE_integer("concurrency", 2, "Tasks checked at the same time.")
flags.DEFINE_string("hacks", "all", "'all', 'none' or a comma-separated list of hack names.")
flags.DEFINE_enum("mode", "after", ["after", "fresh"], "Verifier mode.")
flags.DEFINE_string("out", ".", "Output folder of the report and the quarantine file.")
flags.DEFINE_string("report", None, "JSON report path (default: OUT/check_tasks.json).")
flags.DEFINE_string("quarantine", None, "Quarantine file (default: OUT/quarantine.json).")
flags.DEFINE_integer("procedural", 0, "Also check N procedurally generated tasks.")
flags.DEFINE_integer("seed", 0, "Seed of the procedural tasks.")
flags.DEFINE_string("only", None, "Comma-separated task ids to check (default: all).")


def _hacks(spec: str) -> tuple[str, ...]:
  if spec == "all":
    return tuple(HACKS_BY_NAME)
  if spec == "none":
    return ()
  names = tuple(s.strip() for s in spec.split(",") if s.strip())
  unknown = [n for n in names if n not in HACKS_BY_NAME]
  if unknown:
    raise app.UsageError(f"unknown hacks {unknown}; known: {', '.join(HACKS_BY_NAME)}")
  return names


def format_table(reports: list[TaskGateReport]) -> str:
  """One row per task: verdict, reference passes, no-op, hacks resisted, time, reason."""
  rows = [("task", "verdict", "oracle", "noop", "hacks", "time", "reason")]
  for r in reports:
    oracle = [x for x in r.runs if x.agent == "oracle"]
    noop = [x for x in r.runs if x.agent == "null"]
    hacks = [x for x in r.runs if x.agent.startswith("hack:")]
    verdict = "PASS" if r.ok else ("INFRA" if r.infra_error else "FAIL")
    reason = (r.infra_error or "; ".join(r.reasons))[:90]
    rows.append(
      (
        r.task_id,
        verdict,
        f"{sum(x.passed for x in oracle)}/{len(oracle)}",
        "fails" if noop and not any(x.passed for x in noop) else ("PASSES" if noop else "-"),
        f"{sum(not x.passed for x in hacks)}/{len(hacks)}",
        f"{r.duration_s:.1f}s",
        reason,
      )
    )
  widths = [max(len(row[i]) for row in rows) for i in range(6)]
  lines = [
    "  ".join(c.ljust(w) for c, w in zip(row[:6], widths, strict=True)) + "  " + row[6]
    for row in rows
  ]
  lines.insert(1, "-" * len(lines[0]))
  return "\n".join(lines)


def load_report(e: LoadError) -> TaskGateReport:
  """A task that did not load: failed, with the reason (and quarantined like any other)."""
  return TaskGateReport(e.task_id, False, (f"load_error: {e.reason}",), ())


def _load(tasks_flag: str | None, only: str | None) -> tuple[list, list[LoadError]]:
  """Tasks and load errors; a LaunchError (one line, exit 2) when nothing would be checked."""
  tasks, errors = [], []
  if tasks_flag:
    try:
      tasks, errors = load_suite(tasks_flag)
    except FileNotFoundError as e:
      raise LaunchError(f"--tasks: {e}") from None
  if FLAGS.procedural:
    tasks += procedural.sample(FLAGS.procedural, FLAGS.seed)
  if only:
    keep = {s.strip() for s in only.split(",") if s.strip()}
    hit = lambda tid: tid in keep or tid.split("/")[-1] in keep  # noqa: E731
    tasks = [t for t in tasks if hit(t.id)]
    errors = [e for e in errors if hit(e.task_id)]
    known = {t.id for t in tasks} | {e.task_id for e in errors}
    unknown = sorted(k for k in keep if not any(k in (i, i.split("/")[-1]) for i in known))
    if unknown:
      raise LaunchError(f"--only: no task named {', '.join(unknown)}")
  if not tasks and not errors:
    raise LaunchError(f"no task found under --tasks={tasks_flag!r}")
  return tasks, errors


def main(argv):
  del argv
  if not FLAGS.tasks and not FLAGS.procedural:
    raise app.UsageError("--tasks (or --procedural=N) is required")
  tasks, errors = _load(FLAGS.tasks, FLAGS.only)  # before --out is created
  out_dir = pathlib.Path(FLAGS.out)
  out_dir.mkdir(parents=True, exist_ok=True)
  qpath = FLAGS.quarantine or str(out_dir / "quarantine.json")
  cfg = GateConfig(
    backend=FLAGS.backend,
    image=FLAGS.image,
    k=FLAGS.k,
    hacks=_hacks(FLAGS.hacks),
    verifier=VerifierConfig(mode=FLAGS.mode),
    concurrency=FLAGS.concurrency,
  )
  t0 = time.monotonic()
  done = [0]

  def progress(rep: TaskGateReport) -> None:
    done[0] += 1
    mark = "ok" if rep.ok else ("INFRA" if rep.infra_error else "FAIL")
    print(
      f"[{done[0]}/{len(tasks) + len(errors)}] {rep.task_id}: {mark} ({rep.duration_s:.1f}s)",
      file=sys.stderr,
      flush=True,
    )

  quarantine = Quarantine(qpath)
  broken = [load_report(e) for e in errors]
  for rep in broken:
    quarantine.add(rep.task_id, "; ".join(rep.reasons), source="gate")
    progress(rep)
  reports = check_tasks(tasks, cfg, quarantine, progress) + broken
  print(format_table(reports))
  n_ok = sum(r.ok for r in reports)
  wall = time.monotonic() - t0
  print(
    f"\n{n_ok}/{len(reports)} tasks passed the gate in {wall:.1f}s ({FLAGS.backend}); quarantine: {qpath}"
  )
  out = pathlib.Path(FLAGS.report or out_dir / "check_tasks.json")
  summary = {
    "backend": FLAGS.backend,
    "k": FLAGS.k,
    "hacks": list(cfg.hacks),
    "mode": FLAGS.mode,
    "wall_s": wall,
  }
  summary.update(
    passed=n_ok, total=len(reports), quarantine=qpath, tasks=[r.to_dict() for r in reports]
  )
  out.write_text(json.dumps(summary, indent=2))
  print(f"report: {out}")
  return 0 if n_ok == len(reports) else 1


if __name__ == "__main__":
  from launch import cli

  cli.run(lambda argv: sys.exit(main(argv)))
