"""The task format: a folder with task.toml, instruction.md, environment/, solution/, tests/.

```
<task>/task.toml            id, domain, difficulty 1-5, tags, network, [timeouts], [resources],
                            [verifier], [[milestones]], [[constraints]], [metadata]
<task>/instruction.md       what the agent reads
<task>/environment/setup.sh run in the workspace when the sandbox is created (optional)
<task>/environment/workspace/  files copied into the workspace before setup.sh (optional)
<task>/solution/solve.sh    reference solution (never visible to the agent)
<task>/tests/               hidden tests: test_*.py (pytest) or test.sh
```

The tests' contract (both runners): they run after the agent, as root, in the task's workdir;
`$AGENTRL_WORKSPACE` is the agent's workspace (the task's `workdir`), `$TEST_DIR` the tests'
folder, `$LOGS_DIR` a folder for their output. test.sh writes its reward to
`$LOGS_DIR/reward.txt` (a number; or reward.json); pytest's outcome is read from its JUnit
report. Harbor's fixed paths work too: `/tests/...` and `/logs/verifier/reward.txt` are mapped
to `$TEST_DIR` and `$LOGS_DIR` at grading, in every format.

A `Task` holds the file contents in memory (tasks are small), so loaded, translated
(Terminal-Bench, Harbor) and procedurally generated tasks are the same object.
Bad input raises `TaskFormatError` naming the file and the field (envs/task_files.py: reading
a folder's files). This module is a leaf:
format detection and the loaders of whole folders live in envs/formats/loading.py.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

from envs.task_files import FileEntry as FileEntry  # re-exported: envs.task names the format
from envs.task_files import Files, TaskFormatError, check_links, read_toml, read_tree
from envs.task_files import tomllib as tomllib

DOMAINS = (
  "file_ops",
  "text",
  "python_bugfix",
  "data",
  "git",
  "sysadmin",
  "build",
)
REWARD_KINDS = ("binary", "fraction")
GRADE_MODES = ("after", "fresh")
CONSTRAINT_KINDS = ("command", "unchanged", "only_write_under")


@dataclasses.dataclass(frozen=True)
class Resources:
  cpus: float = 1.0
  memory_mb: int = 1024
  pids: int = 256
  disk_mb: int = 512


@dataclasses.dataclass(frozen=True)
class Milestone:
  """An intermediate goal, checked after every turn by a shell command (exit 0 = reached)."""

  name: str
  check: str
  description: str = ""


@dataclasses.dataclass(frozen=True)
class Constraint:
  """A rule stated in the instruction that must hold during the whole episode.

  kinds: `command` (shell check, exit 0 = respected), `unchanged` (paths keep their initial
  content), `only_write_under` (no file outside `paths` is created or changed).
  """

  name: str
  kind: str
  description: str = ""
  check: str | None = None
  paths: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class TestSpec:
  """How the hidden tests run and how their outcome becomes a reward.

  runner: `pytest` (test_*.py, JUnit XML) or `shell` (test.sh writing reward.txt/json).
  subscores: name -> test-name patterns (fnmatch) whose pass fraction is that sub-score.
  """

  __test__ = False  # not a pytest class

  files: Files = ()
  runner: str = "pytest"
  reward: str = "binary"
  subscores: tuple[tuple[str, tuple[str, ...]], ...] = ()
  env: tuple[tuple[str, str], ...] = ()
  grade_mode: str | None = None  # None: the verifier's default
  rewrite_paths: bool = False  # map /tests and /logs/verifier at grading (task folders: on)
  pre_script: str = ""  # a format's test-script steps that run before pytest (in order)
  post_script: str = ""  # ... and after it (each must exit 0 for a pass)
  # The agent's listening services stay up while the tests run, as in Terminal-Bench's and
  # Harbor's harnesses (their loaders: on); off for every other task (envs.sandbox.services)
  keep_services: bool = False


@dataclasses.dataclass(frozen=True)
class Task:
  """One task, independent of the folder format it came from."""

  id: str
  instruction: str
  domain: str
  difficulty: int
  tests: TestSpec
  solution_script: str = ""
  solution_files: Files = ()
  setup_script: str = ""
  setup_files: Files = ()  # staged at $SETUP_DIR while setup.sh runs, then removed
  workspace_files: Files = ()
  tags: tuple[str, ...] = ()
  agent_timeout_s: float = 600.0
  test_timeout_s: float = 120.0
  resources: Resources = Resources()
  # False, True (the host's network) or "packages" (the machine's package sources only)
  network: bool | str = False
  workdir: str = "/workspace"
  env: tuple[tuple[str, str], ...] = ()
  milestones: tuple[Milestone, ...] = ()
  constraints: tuple[Constraint, ...] = ()
  metadata: tuple[tuple[str, Any], ...] = ()
  source: str = ""  # where it came from: a folder, or "procedural:<family>:<seed>"
  format: str = "agentrl"
  # From a translated Dockerfile: packages the sandbox installs into a per-task image layer at
  # build time, the image's USER, and "container" when the task writes outside its workspace
  # or expects root ("" = the sandbox's default mode).
  apt_packages: tuple[str, ...] = ()
  apt_no_recommends: tuple[str, ...] = ()  # of apt_packages: installed without recommends
  pip_packages: tuple[str, ...] = ()
  user: str = ""
  sandbox_mode: str = ""

  @property
  def suite(self) -> str:
    return self.id.split("/", 1)[0] if "/" in self.id else ""

  @property
  def has_solution(self) -> bool:
    """False for an imported task that ships hidden tests but no reference solution (policy
    agents and RL can use it; the oracle and the quality gate cannot)."""
    return bool(self.solution_script.strip())


class Fields:
  """Typed access to a parsed mapping; errors name the file and the dotted field."""

  def __init__(self, data: Mapping, file: pathlib.Path | str, prefix: str = ""):
    if not isinstance(data, Mapping):
      raise TaskFormatError(
        file, prefix or "<root>", f"expected a table, got {type(data).__name__}"
      )
    self.data, self.file, self.prefix = data, file, prefix

  def name(self, key: str) -> str:
    return f"{self.prefix}.{key}" if self.prefix else key

  def err(self, key: str, cause: str) -> TaskFormatError:
    return TaskFormatError(self.file, self.name(key), cause)

  def check_keys(self, allowed: Iterable[str]) -> None:
    allowed = set(allowed)
    for k in self.data:
      if k not in allowed:
        raise self.err(k, f"unknown field (allowed: {', '.join(sorted(allowed))})")

  def get(self, key: str, typ, default=None, required: bool = False):
    if key not in self.data:
      if required:
        raise self.err(key, "missing required field")
      return default
    v = self.data[key]
    if typ is float and isinstance(v, int) and not isinstance(v, bool):
      v = float(v)
    if isinstance(v, bool) and typ in (int, float):
      raise self.err(key, f"expected {typ.__name__}, got bool")
    if not isinstance(v, typ):
      raise self.err(key, f"expected {getattr(typ, '__name__', typ)}, got {type(v).__name__}")
    return v

  def positive(self, key: str, typ, default):
    v = self.get(key, typ, default)
    if v is not None and v <= 0:
      raise self.err(key, f"must be > 0, got {v}")
    return v

  def str_list(self, key: str) -> tuple[str, ...]:
    v = self.get(key, list, [])
    if not all(isinstance(x, str) for x in v):
      raise self.err(key, "expected a list of strings")
    return tuple(v)

  def sub(self, key: str) -> Fields:
    return Fields(self.get(key, dict, {}), self.file, self.name(key))


def _network(f) -> bool | str:
  v = f.get("network", (bool, str), False)
  if isinstance(v, str) and v != "packages":
    raise f.err("network", f'must be true, false or "packages", got {v!r}')
  return v


def _parse_milestones(f: Fields) -> tuple[Milestone, ...]:
  out = []
  for i, m in enumerate(f.get("milestones", list, [])):
    mf = Fields(m, f.file, f"milestones[{i}]")
    mf.check_keys(("name", "check", "description"))
    out.append(
      Milestone(
        mf.get("name", str, required=True),
        mf.get("check", str, required=True),
        mf.get("description", str, ""),
      )
    )
  return tuple(out)


def _parse_constraints(f: Fields) -> tuple[Constraint, ...]:
  out = []
  for i, c in enumerate(f.get("constraints", list, [])):
    cf = Fields(c, f.file, f"constraints[{i}]")
    cf.check_keys(("name", "kind", "description", "check", "paths"))
    kind = cf.get("kind", str, "command")
    if kind not in CONSTRAINT_KINDS:
      raise cf.err("kind", f"must be one of {CONSTRAINT_KINDS}, got {kind!r}")
    check, paths = cf.get("check", str), cf.str_list("paths")
    if kind == "command" and not check:
      raise cf.err("check", "a 'command' constraint needs a shell check")
    if kind != "command" and not paths:
      raise cf.err("paths", f"a '{kind}' constraint needs paths")
    out.append(
      Constraint(
        cf.get("name", str, required=True), kind, cf.get("description", str, ""), check, paths
      )
    )
  return tuple(out)


def parse_verifier(f: Fields, tests: Files) -> TestSpec:
  """The [verifier] table plus the tests folder -> TestSpec."""
  f.check_keys(("reward", "subscores", "env", "mode", "runner"))
  reward = f.get("reward", str, "binary")
  if reward not in REWARD_KINDS:
    raise f.err("reward", f"must be one of {REWARD_KINDS}, got {reward!r}")
  mode = f.get("mode", str)
  if mode is not None and mode not in GRADE_MODES:
    raise f.err("mode", f"must be one of {GRADE_MODES}, got {mode!r}")
  subs = []
  sf = f.sub("subscores")
  for name in sf.data:
    subs.append((name, sf.str_list(name)))
  env = f.sub("env")
  env_pairs = tuple((k, str(env.get(k, (str, int, float)))) for k in env.data)
  runner = f.get("runner", str) or infer_runner(tests)
  if runner not in ("pytest", "shell"):
    raise f.err("runner", f"must be 'pytest' or 'shell', got {runner!r}")
  # Harbor's habits work here too: /tests is the tests' folder, /logs/verifier the reward's
  # ($TEST_DIR and $LOGS_DIR of the contract), mapped to the grader's copies at grading.
  return TestSpec(tests, runner, reward, tuple(subs), env_pairs, mode, rewrite_paths=True)


def infer_runner(tests: Files) -> str:
  names = {pathlib.PurePosixPath(t.path).name for t in tests}
  if any(n.startswith("test_") and n.endswith(".py") or n.endswith("_test.py") for n in names):
    return "pytest"
  if "test.sh" in names:
    return "shell"
  return "pytest"


_TOP_KEYS = (
  "id",
  "domain",
  "difficulty",
  "tags",
  "network",
  "workdir",
  "schema_version",
  "timeouts",
  "resources",
  "env",
  "verifier",
  "milestones",
  "constraints",
  "metadata",
)


def load_task(path: str | pathlib.Path, suite: str | None = None) -> Task:
  """Loads one task folder in our own format."""
  root = pathlib.Path(path)
  check_links(root)
  toml_path = root / "task.toml"
  if not toml_path.is_file():
    raise TaskFormatError(toml_path, "<file>", "missing task.toml")
  f = Fields(read_toml(toml_path), toml_path)
  f.check_keys(_TOP_KEYS)
  instr_path = root / "instruction.md"
  if not instr_path.is_file():
    raise TaskFormatError(instr_path, "<file>", "missing instruction.md")
  instruction = instr_path.read_text().strip()
  if not instruction:
    raise TaskFormatError(instr_path, "<content>", "instruction is empty")
  tests = read_tree(root / "tests")
  if not tests:
    raise TaskFormatError(root / "tests", "<dir>", "no hidden tests (tests/ is missing or empty)")
  solve = root / "solution" / "solve.sh"
  if not solve.is_file():
    raise TaskFormatError(solve, "<file>", "missing reference solution solution/solve.sh")
  tid = f.get("id", str, root.name)
  if suite and "/" not in tid:
    tid = f"{suite}/{tid}"
  setup = root / "environment" / "setup.sh"
  return make_task(
    f,
    id=tid,
    instruction=instruction,
    tests=parse_verifier(f.sub("verifier"), tests),
    solution_script=solve.read_text(),
    solution_files=read_tree(root / "solution", skip=("solve.sh",)),
    setup_script=setup.read_text() if setup.is_file() else "",
    workspace_files=read_tree(root / "environment" / "workspace"),
    setup_files=tuple(
      f
      for f in read_tree(root / "environment", skip=("setup.sh",))
      if not f.path.startswith("workspace/")
    ),
    source=str(root),
  )


def make_task(f: Fields, **kw) -> Task:
  """Validates the common task.toml fields and builds the Task."""
  domain = f.get("domain", str, required=True)
  if domain not in DOMAINS:
    raise f.err("domain", f"unknown domain {domain!r} (known: {', '.join(DOMAINS)})")
  difficulty = f.get("difficulty", int, required=True)
  if not 1 <= difficulty <= 5:
    raise f.err("difficulty", f"must be an integer 1-5, got {difficulty}")
  t, r = f.sub("timeouts"), f.sub("resources")
  t.check_keys(("agent_s", "test_s"))
  r.check_keys(("cpus", "memory_mb", "pids", "disk_mb"))
  env = f.sub("env")
  workdir = f.get("workdir", str, "/workspace")
  if not workdir.startswith("/"):
    raise f.err("workdir", f"must be an absolute path, got {workdir!r}")
  return Task(
    domain=domain,
    difficulty=difficulty,
    tags=f.str_list("tags"),
    network=_network(f),
    workdir=workdir,
    agent_timeout_s=t.positive("agent_s", float, 600.0),
    test_timeout_s=t.positive("test_s", float, 120.0),
    resources=Resources(
      r.positive("cpus", float, 1.0),
      r.positive("memory_mb", int, 1024),
      r.positive("pids", int, 256),
      r.positive("disk_mb", int, 512),
    ),
    env=tuple((k, str(env.get(k, (str, int, float)))) for k in env.data),
    milestones=_parse_milestones(f),
    constraints=_parse_constraints(f),
    metadata=tuple(sorted(f.get("metadata", dict, {}).items())),
    **kw,
  )


BUILTIN_DIR = pathlib.Path(__file__).parent / "tasks"
