"""Finds and loads task folders of every supported format.

    tasks = load_tasks("envs/tasks/core")               # raises on the first bad task
    tasks, errors = load_suite("path/to/tb2", "fix-*")  # a bad task is a LoadError, not an abort

Formats: ours (`task.toml` with a top-level `domain`, envs.task.load_task), Terminal-Bench 1
(`task.yaml`) and Harbor / Terminal-Bench 2 (`task.toml` + `environment/`), both translated by
envs.formats.terminal_bench. A folder holding one of those files is a task; a task nested inside another is
a fixture of it. The suite of a task is the first folder level below the root it was found
under. `load_suite` matches `pattern` against folder names before loading, so a filter can
route around a task that does not load.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import pathlib

from envs.formats import terminal_bench as formats
from envs.task import BUILTIN_DIR, Task, TaskFormatError, load_task, tomllib


@dataclasses.dataclass(frozen=True)
class LoadError:
  """A task folder that did not load: its would-be id, the folder and the one-line reason."""

  task_id: str
  folder: str
  reason: str

  def record(self) -> dict:
    """The row `launch.eval` writes for it (failure mode `load_error`, in every total)."""
    return {
      "task_id": self.task_id,
      "suite": self.task_id.split("/", 1)[0] if "/" in self.task_id else "",
      "domain": "",
      "difficulty": None,
      "format": detect_format(self.folder) or "unknown",
      "trial": 0,
      "agent": "",
      "passed": False,
      "reward": None,
      "masked": True,
      "failure_mode": "load_error",
      "grade_failure_mode": "load_error",
      "detail": self.reason,
      "turns": 0,
      "tokens": 0,
      "wall_s": 0.0,
      "attempts": 0,
      "subscores": {},
      "tests": [],
      "checks": None,
      "turn_checks": [],
      "trajectory": [],
      "instruction": "",
    }


def detect_format(path: str | pathlib.Path) -> str:
  """'agentrl', 'terminal-bench' or 'harbor' for a task folder; '' if it is none of them."""
  root = pathlib.Path(path)
  if (root / "task.yaml").is_file():
    return "terminal-bench"
  if (root / "task.toml").is_file():
    if (root / "task.toml").is_symlink():  # never read through a link: the loader refuses it
      return "agentrl"
    # Our format has a top-level `domain`; Harbor keeps its metadata in [metadata].
    try:
      top = tomllib.loads((root / "task.toml").read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
      return "agentrl"  # load_task reports the syntax error with the file name
    harbor = (root / "environment" / "Dockerfile").is_file() or "metadata" in top
    return "harbor" if "domain" not in top and (harbor or "version" in top) else "agentrl"
  return ""


def load_any(path: str | pathlib.Path, suite: str | None = None) -> Task:
  """Loads a task folder of any supported format."""
  fmt = detect_format(path)
  if fmt == "agentrl":
    return load_task(path, suite)
  if fmt == "terminal-bench":
    return formats.load_terminal_bench(path, suite)
  if fmt == "harbor":
    return formats.load_harbor(path, suite)
  raise TaskFormatError(path, "<format>", "not a task folder (no task.toml or task.yaml)")


def find_task_dirs(root: str | pathlib.Path) -> list[pathlib.Path]:
  """Every task folder under `root` (a folder holding task.toml or task.yaml), sorted."""
  root = pathlib.Path(root)
  if detect_format(root):
    return [root]
  found = {p.parent for p in root.rglob("task.toml")} | {p.parent for p in root.rglob("task.yaml")}
  # A folder nested inside another task (e.g. a fixture) is not a task of its own.
  found = {d for d in found if not any(a in found for a in d.parents)}
  return sorted(found)


def _suite_of(root: pathlib.Path, d: pathlib.Path) -> str | None:
  """The first folder level below `root`; a single task folder's suite is its parent's name,
  so a task gets the same id whether its folder or its suite's folder is loaded."""
  if d == root:
    return root.resolve().parent.name or None
  rel = d.relative_to(root).parts
  return rel[0] if len(rel) > 1 else root.resolve().name


def folder_id(root: pathlib.Path, d: pathlib.Path) -> str:
  """The id a task folder gets unless its task.toml names another: `suite/folder`."""
  suite = _suite_of(root, d)
  return f"{suite}/{d.name}" if suite else d.name


def load_suite(
  root: str | pathlib.Path, pattern: str | None = None
) -> tuple[list[Task], list[LoadError]]:
  """Every task under `root` whose folder (or `suite/folder`) matches `pattern`, and the errors.

  A task that does not load, or repeats an id, becomes a LoadError naming the reason; the
  rest still load.
  """
  root = pathlib.Path(root)
  if not root.exists():
    raise FileNotFoundError(f"{root}: no such task folder")
  out, errors, seen = [], [], {}
  for d in find_task_dirs(root):
    fid = folder_id(root, d)
    if pattern and not (fnmatch.fnmatchcase(fid, pattern) or fnmatch.fnmatchcase(d.name, pattern)):
      continue
    try:
      task = load_any(d, _suite_of(root, d))
    except (TaskFormatError, OSError, UnicodeDecodeError) as e:
      errors.append(LoadError(fid, str(d), " ".join(str(e).split())))
      continue
    if task.id in seen:
      errors.append(LoadError(task.id, str(d), f"duplicate task id (also {seen[task.id]})"))
      continue
    seen[task.id] = d
    out.append(task)
  return out, errors


def load_tasks(root: str | pathlib.Path) -> list[Task]:
  """Loads every task under `root`; raises TaskFormatError on the first bad one."""
  root = pathlib.Path(root)
  out, seen = [], {}
  for d in find_task_dirs(root):
    task = load_any(d, _suite_of(root, d))
    if task.id in seen:
      raise TaskFormatError(
        d / "task.toml", "id", f"duplicate task id {task.id!r} (also {seen[task.id]})"
      )
    seen[task.id] = d
    out.append(task)
  return out


def builtin_tasks() -> list[Task]:
  return load_tasks(BUILTIN_DIR)


def resolve(spec: str, pattern: str | None = None) -> tuple[list[Task], list[LoadError]]:
  """Tasks from a comma-separated list of folders, built-in suite names or `builtin`.

  Raises FileNotFoundError (one line) for an item that is neither a folder nor a suite.
  """
  tasks: list[Task] = []
  errors: list[LoadError] = []
  for item in [s.strip() for s in spec.split(",") if s.strip()]:
    path = pathlib.Path(item)
    if item in ("builtin", "all"):
      path = BUILTIN_DIR
    elif not path.exists() and (BUILTIN_DIR / item).is_dir():
      path = BUILTIN_DIR / item
    elif not path.exists():
      suites = sorted(p.name for p in BUILTIN_DIR.iterdir() if p.is_dir())
      raise FileNotFoundError(
        f"--tasks: {item!r} is neither a folder nor a built-in suite ({', '.join(suites)}, builtin)"
      )
    t, e = load_suite(path, pattern)
    tasks += t
    errors += e
  return tasks, errors
