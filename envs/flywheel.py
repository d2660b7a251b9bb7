"""The data flywheel: failed evaluation episodes become material for new tasks.

`export_failures(trials, tasks, out_dir)` writes, for every graded trial that failed:

  <out>/failures.jsonl              one line per failure (task, trial, failure mode, detail)
  <out>/<task>__t<trial>/failure.json   instruction, trajectory (actions + outputs), failure mode,
                                    grader detail, test outcomes, milestone/constraint record
  <out>/<task>__t<trial>/task/      a loadable task folder to start the new task from: the
                                    source task with a new id (`flywheel/<name>-t<trial>`), tags
                                    `flywheel` + the failure mode, and the failure's facts in
                                    [metadata]. Edit its instruction or environment (a variant,
                                    a hint, a start from the failing state) and run the gate.

`decontamination_report(train, evals)` checks training pools against evaluation suites with
the task pool's n-gram overlap (envs.task_pool) and adds the evaluation side's view: which eval
tasks are contaminated and by how many training tasks.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
from collections.abc import Iterable, Sequence

from envs.task import DOMAINS, Task

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _slug(text: str) -> str:
  return _SAFE.sub("_", text).strip("_") or "task"


# ---------------------------------------------------------------- TOML writing
# No TOML writer is installed (tomllib only reads); task.toml needs strings, numbers, booleans,
# lists and tables, which JSON string escapes cover (TOML basic strings accept them).


def _toml_value(v) -> str:
  if isinstance(v, bool):
    return "true" if v else "false"
  if isinstance(v, (int, float)):
    return repr(v)
  if isinstance(v, str):
    return json.dumps(v)
  if isinstance(v, (list, tuple)):
    return "[" + ", ".join(_toml_value(x) for x in v) + "]"
  if isinstance(v, dict):
    return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
  raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _table(name: str, items: dict) -> list[str]:
  items = {k: v for k, v in items.items() if v is not None}
  if not items:
    return []
  return ["", f"[{name}]"] + [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in items.items()]


def task_toml(task: Task, task_id: str, tags: Sequence[str], metadata: dict) -> str:
  """task.toml text for `task` (our format) with a new id, tags and metadata."""
  t = task.tests
  lines = [
    f"id = {json.dumps(task_id)}",
    f"domain = {json.dumps(task.domain)}",
    f"difficulty = {task.difficulty}",
    f"tags = {_toml_value(list(tags))}",
    f"network = {_toml_value(task.network)}",
    f"workdir = {json.dumps(task.workdir)}",
  ]
  lines += _table("timeouts", {"agent_s": task.agent_timeout_s, "test_s": task.test_timeout_s})
  r = task.resources
  lines += _table(
    "resources", {"cpus": r.cpus, "memory_mb": r.memory_mb, "pids": r.pids, "disk_mb": r.disk_mb}
  )
  lines += _table("env", dict(task.env))
  lines += _table("verifier", {"reward": t.reward, "runner": t.runner, "mode": t.grade_mode})
  lines += _table("verifier.env", dict(t.env))
  lines += _table("verifier.subscores", {k: list(v) for k, v in t.subscores})
  for m in task.milestones:
    lines += ["", "[[milestones]]"]
    lines += [
      f"{k} = {_toml_value(v)}"
      for k, v in (("name", m.name), ("check", m.check), ("description", m.description))
    ]
  for c in task.constraints:
    lines += ["", "[[constraints]]", f"name = {json.dumps(c.name)}", f"kind = {json.dumps(c.kind)}"]
    lines.append(f"description = {json.dumps(c.description)}")
    if c.check is not None:
      lines.append(f"check = {json.dumps(c.check)}")
    if c.paths:
      lines.append(f"paths = {_toml_value(list(c.paths))}")
  lines += _table("metadata", metadata)
  return "\n".join(lines) + "\n"


def _write_files(root: pathlib.Path, files) -> None:
  for f in files:
    p = root / f.path
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(f.data)
    p.chmod(f.mode & 0o777)


def write_task_folder(
  task: Task, dest: str | pathlib.Path, task_id: str, tags=(), metadata=None
) -> pathlib.Path:
  """Writes `task` as a folder in our format (envs.task.load_task reads it back)."""
  if task.tests.rewrite_paths and task.format != "agentrl":
    raise ValueError(f"{task.id}: imported-format tests need their own folder layout")
  root = pathlib.Path(dest)
  root.mkdir(parents=True, exist_ok=True)
  meta = {k: v for k, v in task.metadata if isinstance(v, (str, int, float, bool))}
  meta.update(metadata or {})
  (root / "task.toml").write_text(task_toml(task, task_id, tags, meta))
  (root / "instruction.md").write_text(task.instruction + "\n")
  env = root / "environment"
  for d in (env, root / "solution", root / "tests"):
    d.mkdir(parents=True, exist_ok=True)
  _write_files(env / "workspace", task.workspace_files)
  _write_files(env, task.setup_files)
  if task.setup_script:
    (env / "setup.sh").write_text(task.setup_script)
  _write_files(root / "solution", task.solution_files)
  (root / "solution" / "solve.sh").write_text(task.solution_script)
  _write_files(root / "tests", task.tests.files)
  return root


def _draft(task: Task, dest: pathlib.Path, new_id: str, facts: dict) -> str:
  """The new-task draft: our format rewritten from the Task, imported formats copied."""
  tags = [*task.tags, "flywheel", facts["failure_mode"]]
  if task.format == "agentrl" and task.domain in DOMAINS:
    write_task_folder(task, dest, new_id, dict.fromkeys(tags), facts)
    return "agentrl"
  src = pathlib.Path(task.source)
  if not src.is_dir():
    return ""
  shutil.copytree(src, dest, symlinks=True)  # a link is copied as a link, never read through
  (dest / "flywheel.json").write_text(json.dumps({"id": new_id, "tags": tags, **facts}, indent=1))
  return task.format


def export_failures(
  trials: Iterable[dict], tasks: Sequence[Task], out_dir: str | pathlib.Path
) -> list[dict]:
  """Exports every graded, failed trial; returns the index rows (also in failures.jsonl)."""
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  by_id = {t.id: t for t in tasks}
  rows = []
  for tr in trials:
    if tr.get("masked") or tr["passed"]:
      continue
    task = by_id[tr["task_id"]]
    name = f"{_slug(tr['task_id'])}__t{tr['trial']}"
    folder = out / name
    if folder.exists():
      shutil.rmtree(folder)
    folder.mkdir(parents=True)
    checks = tr.get("checks") or {}
    facts = {
      "origin": tr["task_id"],
      "trial": tr["trial"],
      "agent": tr["agent"],
      "failure_mode": tr["failure_mode"],
      "missed_milestones": [m for m, t in (checks.get("first_reached") or {}).items() if t is None],
      "violated_constraints": [
        c for c, t in (checks.get("first_violation") or {}).items() if t is not None
      ],
    }
    if checks.get("first_violation_turn") is not None:
      facts["first_violation_turn"] = checks["first_violation_turn"]
    record = {
      **facts,
      "instruction": task.instruction,
      "detail": tr.get("detail", ""),
      "reward": tr.get("reward"),
      "finish_reason": tr.get("finish_reason"),
      "trajectory": tr.get("trajectory", []),
      "tests": tr.get("tests", []),
      "checks": checks,
      "turn_checks": tr.get("turn_checks", []),
      "source": task.source,
    }
    (folder / "failure.json").write_text(json.dumps(record, indent=1, default=str))
    new_id = f"flywheel/{_slug(task.id.split('/')[-1])}-t{tr['trial']}"
    fmt = _draft(task, folder / "task", new_id, facts)
    row = {
      **facts,
      "folder": name,
      "draft_task": "task" if fmt else None,
      "draft_format": fmt or None,
    }
    rows.append(row)
  with open(out / "failures.jsonl", "w") as f:
    for row in rows:
      f.write(json.dumps(row) + "\n")
  return rows


def decontamination_report(
  train: Iterable[Task], evals: Sequence[Task], n: int = 8, threshold: float = 0.5
) -> dict:
  """Training-vs-evaluation n-gram overlap (envs.task_pool.decontaminate) + a per-eval view."""
  from envs.task_pool import decontaminate

  rep = decontaminate(train, evals, n=n, threshold=threshold)
  per_eval: dict[str, list[str]] = {}
  for m in rep["matches"]:
    per_eval.setdefault(m["eval"], []).append(m["train"])
  rep["contaminated_eval_tasks"] = {k: sorted(v) for k, v in sorted(per_eval.items())}
  rep["clean_eval_tasks"] = sum(e.id not in per_eval for e in evals)
  return rep


def write_decontamination(report: dict, path: str | pathlib.Path) -> None:
  from envs.task_pool import write_decontamination_report

  write_decontamination_report(report, path)
