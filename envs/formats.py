"""Loaders for Terminal-Bench and Harbor task folders.

Terminal-Bench: `task.yaml` (instruction, difficulty, category, tags, max_agent_timeout_sec,
max_test_timeout_sec), `Dockerfile`, `solution.sh` or `solution.yaml`, `run-tests.sh`, `tests/`.
Harbor: `instruction.md`, `task.toml` ([metadata], [agent], [verifier], [environment]),
`environment/Dockerfile`, `solution/solve.sh` or `solution.yaml`, `tests/test.sh`.

Both become a `Task`: the Dockerfile is translated onto the base image (envs/dockerfile.py);
when `tests/` holds pytest files, the format's runner script (which usually fetches uv or
pytest from the network) is replaced by the verifier's offline pytest run; otherwise the
script runs as a `shell` runner that writes reward.txt / reward.json. Paths the formats fix
(`/tests`, `/logs/verifier`) are rewritten to the verifier's own folders at grading time.
"""

from __future__ import annotations

import pathlib
import re

import yaml

from envs import dockerfile
from envs.task import (
  Fields,
  FileEntry,
  Resources,
  Task,
  TaskFormatError,
  TestSpec,
  infer_runner,
  read_toml,
  read_tree,
)

DIFFICULTY = {"trivial": 1, "easy": 2, "medium": 3, "hard": 4, "expert": 5, "unknown": 3}


def _difficulty(f: Fields, key: str, default: int = 3) -> int:
  v = f.get(key, (str, int), None)
  if v is None:
    return default
  if isinstance(v, int):
    if not 1 <= v <= 5:
      raise f.err(key, f"must be 1-5 or one of {sorted(DIFFICULTY)}, got {v}")
    return v
  if v.lower() not in DIFFICULTY:
    raise f.err(key, f"must be 1-5 or one of {sorted(DIFFICULTY)}, got {v!r}")
  return DIFFICULTY[v.lower()]


def solution_from_yaml(path: pathlib.Path) -> str:
  """A solution.yaml (a list of commands, or of {command: ...}) as one shell script."""
  try:
    data = yaml.safe_load(path.read_text())
  except yaml.YAMLError as e:
    raise TaskFormatError(path, "<syntax>", f"invalid YAML: {e}") from None
  if not isinstance(data, list) or not data:
    raise TaskFormatError(path, "<root>", "expected a non-empty list of commands")
  lines = []
  for i, item in enumerate(data):
    cmd = item.get("command") if isinstance(item, dict) else item
    if not isinstance(cmd, str):
      raise TaskFormatError(path, f"[{i}].command", "expected a command string")
    lines.append(cmd.rstrip("\n"))
  return "\n".join(lines) + "\n"


def _tests(root: pathlib.Path, runner_script: pathlib.Path) -> TestSpec:
  tests = read_tree(root / "tests")
  script_name = runner_script.name
  if runner_script.is_file() and not any(t.path == script_name for t in tests):
    tests += (FileEntry("test.sh", runner_script.read_bytes(), 0o755),)
  elif script_name != "test.sh" and runner_script.is_file():
    tests = tuple(
      FileEntry("test.sh", t.data, 0o755) if t.path == script_name else t for t in tests
    )
  if not tests:
    raise TaskFormatError(root / "tests", "<dir>", "no tests (tests/ is missing or empty)")
  runner = infer_runner(tests)
  if runner == "pytest":  # the format's runner script is replaced by an offline pytest run
    tests = tuple(t for t in tests if t.path not in ("test.sh", "run-tests.sh"))
  elif not any(t.path == "test.sh" for t in tests):
    raise TaskFormatError(root / "tests", "test.sh", "no pytest files and no test script")
  return TestSpec(tests, runner, "binary", (), (), None, rewrite_paths=True)


def _solution(root: pathlib.Path, candidates: tuple[str, ...]) -> tuple[str, tuple[FileEntry, ...]]:
  for c in candidates:
    p = root / c
    if p.is_file():
      script = solution_from_yaml(p) if p.suffix in (".yaml", ".yml") else p.read_text()
      files = read_tree(p.parent, skip=(p.name,)) if p.parent != root else ()
      return script, files
  raise TaskFormatError(
    root / candidates[0], "<file>", f"no reference solution (looked for {', '.join(candidates)})"
  )


def _translate(root: pathlib.Path, context_dir: pathlib.Path) -> dockerfile.DockerPlan:
  df = context_dir / "Dockerfile"
  if not df.is_file():
    raise TaskFormatError(
      df, "<file>", "missing Dockerfile (images cannot be pulled; it is translated)"
    )
  return dockerfile.translate(df.read_text(), read_tree(context_dir), str(df))


def load_terminal_bench(path: str | pathlib.Path, suite: str | None = None) -> Task:
  """Loads a Terminal-Bench task folder."""
  root = pathlib.Path(path)
  yml = root / "task.yaml"
  try:
    data = yaml.safe_load(yml.read_text())
  except yaml.YAMLError as e:
    raise TaskFormatError(yml, "<syntax>", f"invalid YAML: {e}") from None
  f = Fields(data or {}, yml)
  instruction = f.get("instruction", str)
  if instruction is None and isinstance(data.get("descriptions"), list) and data["descriptions"]:
    instruction = Fields(data["descriptions"][0], yml, "descriptions[0]").get(
      "description", str, required=True
    )
  if not instruction or not instruction.strip():
    raise f.err("instruction", "missing required field")
  plan = _translate(root, root)
  script, files = _solution(root, ("solution.sh", "solution.yaml"))
  tid = root.name if not suite else f"{suite}/{root.name}"
  meta = {
    k: v for k, v in data.items() if isinstance(v, (str, int, float, bool)) and k != "instruction"
  }
  return Task(
    id=tid,
    instruction=instruction.strip(),
    domain=f.get("category", str, "terminal-bench"),
    difficulty=_difficulty(f, "difficulty"),
    tests=_tests(root, root / "run-tests.sh"),
    solution_script=script,
    solution_files=files,
    setup_script=plan.setup_script,
    setup_files=plan.setup_files,
    tags=f.str_list("tags"),
    agent_timeout_s=float(f.positive("max_agent_timeout_sec", (int, float), 360.0)),
    test_timeout_s=float(f.positive("max_test_timeout_sec", (int, float), 60.0)),
    workdir=plan.workdir,
    env=plan.env,
    metadata=tuple(sorted(meta.items())) + (("dockerfile_warnings", plan.warnings),),
    source=str(root),
    format="terminal-bench",
  )


def _size_mb(f: Fields, key_mb: str, key_str: str, default: int) -> int:
  if key_mb in f.data:
    return int(f.positive(key_mb, (int, float), default))
  v = f.get(key_str, (str, int), None)
  if v is None:
    return default
  m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)i?[bB]?\s*", str(v))
  if not m:
    raise f.err(key_str, f"expected a size like '2G' or '512M', got {v!r}")
  scale = {"": 1 / (1 << 20), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}[m.group(2).lower()]
  return max(1, int(float(m.group(1)) * scale))


def load_harbor(path: str | pathlib.Path, suite: str | None = None) -> Task:
  """Loads a Harbor task folder."""
  root = pathlib.Path(path)
  toml_path = root / "task.toml"
  f = Fields(read_toml(toml_path), toml_path)
  meta, agent, ver, env = f.sub("metadata"), f.sub("agent"), f.sub("verifier"), f.sub("environment")
  instr_path = root / "instruction.md"
  if not instr_path.is_file() or not instr_path.read_text().strip():
    raise TaskFormatError(instr_path, "<file>", "missing or empty instruction.md")
  if (root / "environment" / "Dockerfile").is_file():
    plan = _translate(root, root / "environment")
  elif env.get("docker_image", str):
    raise env.err(
      "docker_image", "prebuilt images cannot be pulled here; ship environment/Dockerfile"
    )
  else:
    raise TaskFormatError(root / "environment" / "Dockerfile", "<file>", "missing Dockerfile")
  script, files = _solution(root, ("solution/solve.sh", "solution/solution.yaml", "solution.yaml"))
  tests = _tests(root, root / "tests" / "test.sh")
  venv = ver.sub("env")
  tests = TestSpec(
    tests.files,
    tests.runner,
    "binary",
    (),
    tuple((k, str(venv.data[k])) for k in venv.data),
    None,
    True,
  )
  tid = root.name if not suite else f"{suite}/{root.name}"
  extra = {k: v for k, v in meta.data.items() if isinstance(v, (str, int, float, bool))}
  return Task(
    id=tid,
    instruction=instr_path.read_text().strip(),
    domain=meta.get("category", str, "harbor"),
    difficulty=_difficulty(meta, "difficulty"),
    tests=tests,
    solution_script=script,
    solution_files=files,
    setup_script=plan.setup_script,
    setup_files=plan.setup_files,
    tags=meta.str_list("tags"),
    agent_timeout_s=float(agent.positive("timeout_sec", (int, float), 600.0)),
    test_timeout_s=float(ver.positive("timeout_sec", (int, float), 120.0)),
    resources=Resources(
      cpus=float(env.positive("cpus", (int, float), 1.0)),
      memory_mb=_size_mb(env, "memory_mb", "memory", 1024),
      disk_mb=min(_size_mb(env, "storage_mb", "storage", 512), 4096),
    ),
    network=bool(env.get("allow_internet", bool, False)),
    workdir=plan.workdir,
    env=plan.env,
    metadata=tuple(sorted(extra.items())) + (("dockerfile_warnings", plan.warnings),),
    source=str(root),
    format="harbor",
  )
