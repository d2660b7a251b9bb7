"""Loaders for Terminal-Bench and Harbor task folders.

Terminal-Bench: `task.yaml` (instruction, difficulty, category, tags, max_agent_timeout_sec,
max_test_timeout_sec), `Dockerfile`, `solution.sh` or `solution.yaml`, `run-tests.sh`, `tests/`.
Harbor: `instruction.md`, `task.toml` ([metadata], [agent], [verifier], [environment]),
`environment/Dockerfile`, `solution/solve.sh` or `solution.yaml`, `tests/test.sh`.

Both become a `Task`: the Dockerfile is translated onto the base image (envs/formats/dockerfile.py;
TB1's docker-compose.yaml is read by envs/formats/compose.py), and the format's test script is split
by envs/formats/test_script.py: its network boilerplate is replaced by the verifier's offline pytest
run and every other command runs before or after it, in order (a script without pytest runs as
a `shell` runner that writes reward.txt / reward.json). Paths the formats fix (`/tests`,
`/logs/verifier`) are rewritten to the verifier's own folders at grading time.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

import yaml

from envs.formats import compose, dockerfile, test_script
from envs.formats.dockerfile_syntax import dockerignore, ignored
from envs.formats.test_script import TestScript
from envs.task import Fields, Resources, Task, TestSpec, infer_runner
from envs.task_files import FileEntry, TaskFormatError, check_links, read_toml, read_tree

DIFFICULTY = {"trivial": 1, "easy": 2, "medium": 3, "hard": 4, "expert": 5, "unknown": 3}
TB1_DISK_MB = 4096  # the most disk one imported task gets (Harbor's storage_mb is capped here too)
TB1_MEMORY_MB = 4096  # TB1 declares no memory limit


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


# Terminal-Bench 1's harness scores run-tests.sh with the task's parser, not by its exit code;
# its pytest parser reads the PASSED / FAILED ... lines after "short test summary info" and the
# task passes when there are some and all PASSED. A script that writes a reward file keeps it.
TB1_PYTEST_PARSER = r"""bash "$(dirname "$0")/tb1-run-tests.sh" 2>&1 | tee /logs/verifier/tb1-output.txt
rc=${PIPESTATUS[0]}
if [ -e /logs/verifier/reward.txt ] || [ -e /logs/verifier/reward.json ]; then exit "$rc"; fi
awk '/short test summary info/ { s = 1; next }
  s && /^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) / { n++; if ($1 != "PASSED") bad++ }
  END { print (n > 0 && bad == 0) ? 1 : 0 }' /logs/verifier/tb1-output.txt > /logs/verifier/reward.txt
"""


def _texts(files: tuple[FileEntry, ...]) -> dict[str, str]:
  """The test folder's text files by relative path (helpers a runner script may source)."""
  out = {}
  for f in files:
    try:
      out[f.path] = f.data.decode()
    except UnicodeDecodeError:
      continue
  return out


def _tests(
  root: pathlib.Path, runner_script: pathlib.Path, parser: str | None = None
) -> tuple[TestSpec, TestScript | None]:
  """The hidden tests, with the format's runner script split by envs.formats.test_script; `parser`:
  Terminal-Bench 1's parser_name, which scores a script that does not run pytest itself. Their
  harness runs the tests beside the agent's running services: `keep_services` is on."""
  tests = read_tree(root / "tests")
  rel = (
    runner_script.relative_to(root / "tests").as_posix()
    if runner_script.parent == root / "tests"
    else None
  )
  others = tuple(t for t in tests if t.path != rel)
  if not runner_script.is_file():
    if infer_runner(others) != "pytest" or not others:
      raise TaskFormatError(root / "tests", "<dir>", "no tests (tests/ is missing or empty)")
    return TestSpec(others, "pytest", rewrite_paths=True, keep_services=True), None
  plan = test_script.parse(runner_script.read_text(), str(runner_script), _texts(others))
  if plan.runs_pytest:
    if not any(pathlib.PurePosixPath(t.path).name.startswith("test_") for t in others):
      raise TaskFormatError(
        runner_script, "pytest", "the script runs pytest but tests/ holds no test_*.py file"
      )
    spec = TestSpec(
      others,
      "pytest",
      rewrite_paths=True,
      pre_script=plan.pre,
      post_script=plan.post,
      keep_services=True,
    )
    return spec, plan
  script = ("set -e\n" if plan.set_e else "") + plan.shell
  if parser is None:
    files = (FileEntry("test.sh", script.encode(), 0o755),)
  elif parser == "pytest":
    files = (
      FileEntry("tb1-run-tests.sh", script.encode(), 0o755),
      FileEntry("test.sh", TB1_PYTEST_PARSER.encode(), 0o755),
    )
  else:
    raise TaskFormatError(
      runner_script.parent / "task.yaml", "parser_name", f"parser {parser!r} is not supported"
    )
  return TestSpec(others + files, "shell", rewrite_paths=True, keep_services=True), plan


def _solution(root: pathlib.Path, candidates: tuple[str, ...]) -> tuple[str, tuple[FileEntry, ...]]:
  """The reference solution, or ("", ()) when the task ships none: hidden tests are enough to
  grade a policy (Task.has_solution; the oracle and the gate report the task instead)."""
  for c in candidates:
    p = root / c
    if p.is_file():
      script = solution_from_yaml(p) if p.suffix in (".yaml", ".yml") else p.read_text()
      files = read_tree(p.parent, skip=(p.name,)) if p.parent != root else ()
      return script, files
  return "", ()


def _translate(
  dockerfile_path: pathlib.Path, context_dir: pathlib.Path, exclude: tuple[str, ...]
) -> dockerfile.DockerPlan:
  if not dockerfile_path.is_file():
    raise TaskFormatError(
      dockerfile_path, "<file>", "missing Dockerfile (images cannot be pulled; it is translated)"
    )
  ignore = context_dir / ".dockerignore"
  patterns = dockerignore(ignore.read_text()) if ignore.is_file() else []
  context = tuple(f for f in read_tree(context_dir) if not ignored(patterns, f.path))
  return dockerfile.translate(
    dockerfile_path.read_text(), context, str(dockerfile_path), exclude=exclude
  )


def _image_fields(plan: dockerfile.DockerPlan, script: TestScript | None) -> dict:
  """The Task fields a translated image and test script give."""
  extra_apt = script.apt_packages if script else ()
  extra_pip = script.pip_packages if script else ()
  return dict(
    setup_script=plan.setup_script,
    setup_files=plan.setup_files,
    workdir=plan.workdir,
    env=plan.env,
    apt_packages=tuple(dict.fromkeys(plan.apt_packages + extra_apt)),
    apt_no_recommends=tuple(p for p in plan.apt_no_recommends if p not in extra_apt),
    pip_packages=tuple(dict.fromkeys(plan.pip_packages + extra_pip)),
    user=plan.user,
    sandbox_mode="container" if plan.needs_container else "",
  )


def _str_env(f: Fields) -> dict[str, str]:
  """An env table ([environment.env], [verifier.env]) as strings."""
  return {k: str(f.get(k, (str, int, float, bool))) for k in f.data}


def _warnings(plan: dockerfile.DockerPlan, script: TestScript | None) -> tuple:
  dropped = script.dropped if script else ()
  notes = tuple(f"test script {d} (replaced by the offline pytest run)" for d in dropped)
  return (("dockerfile_warnings", plan.warnings + notes),)


def load_terminal_bench(path: str | pathlib.Path, suite: str | None = None) -> Task:
  """Loads a Terminal-Bench task folder."""
  root = pathlib.Path(path)
  check_links(root)
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
  build = compose.read(root)
  exclude = dockerfile.TB1_EXCLUDED if build.context == root else ()
  plan = _translate(build.dockerfile, build.context, exclude)
  parser = f.get("parser_name", str, "pytest")
  tests, test_plan = _tests(root, root / "run-tests.sh", parser)
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
    tests=tests,
    solution_script=script,
    solution_files=files,
    tags=f.str_list("tags"),
    agent_timeout_s=float(f.positive("max_agent_timeout_sec", (int, float), 360.0)),
    test_timeout_s=float(f.positive("max_test_timeout_sec", (int, float), 60.0)),
    metadata=tuple(sorted(meta.items()))
    + _warnings(plan, test_plan)
    + (("compose_warnings", build.warnings),),
    network="packages",  # TB1's harness runs every task with the network: package egress here
    # TB1 declares no limits and its harness runs Docker's defaults (none): the largest disk
    # and memory this replay grants (Harbor's storage cap), not the native tasks' 512 MiB, in
    # which an `apt-get install` of a toolchain stops half-way.
    resources=Resources(memory_mb=TB1_MEMORY_MB, disk_mb=TB1_DISK_MB),
    source=str(root),
    format="terminal-bench",
    **{**_image_fields(plan, test_plan), **build.overrides(plan)},
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
  check_links(root)
  toml_path = root / "task.toml"
  f = Fields(read_toml(toml_path), toml_path)
  meta, agent, ver, env = f.sub("metadata"), f.sub("agent"), f.sub("verifier"), f.sub("environment")
  instr_path = root / "instruction.md"
  if not instr_path.is_file() or not instr_path.read_text().strip():
    raise TaskFormatError(instr_path, "<file>", "missing or empty instruction.md")
  if (root / "environment" / "Dockerfile").is_file():
    plan = _translate(root / "environment" / "Dockerfile", root / "environment", ())
  elif env.get("docker_image", str):
    raise env.err(
      "docker_image", "prebuilt images cannot be pulled here; ship environment/Dockerfile"
    )
  else:
    raise TaskFormatError(root / "environment" / "Dockerfile", "<file>", "missing Dockerfile")
  script, files = _solution(root, ("solution/solve.sh", "solution/solution.yaml", "solution.yaml"))
  if env.get("gpus", (int, float), 0):
    raise env.err("gpus", "the task needs a GPU; sandboxes here have none")
  tests, test_plan = _tests(root, root / "tests" / "test.sh")
  venv = ver.sub("env")
  tests = dataclasses.replace(tests, env=tuple((k, str(venv.data[k])) for k in venv.data))
  tid = root.name if not suite else f"{suite}/{root.name}"
  extra = {k: v for k, v in meta.data.items() if isinstance(v, (str, int, float, bool))}
  fields = _image_fields(plan, test_plan)
  return Task(
    id=tid,
    instruction=instr_path.read_text().strip(),
    domain=meta.get("category", str, "harbor"),
    difficulty=_difficulty(meta, "difficulty"),
    tests=tests,
    solution_script=script,
    solution_files=files,
    tags=meta.str_list("tags"),
    agent_timeout_s=float(agent.positive("timeout_sec", (int, float), 600.0)),
    test_timeout_s=float(ver.positive("timeout_sec", (int, float), 120.0)),
    resources=Resources(
      cpus=float(env.positive("cpus", (int, float), 1.0)),
      memory_mb=_size_mb(env, "memory_mb", "memory", 1024),
      disk_mb=min(_size_mb(env, "storage_mb", "storage", 512), TB1_DISK_MB),
    ),
    # allow_internet (Harbor's default: true) grants the network in Harbor's own harness;
    # here it grants package egress only (the machine's package sources, nothing else)
    metadata=tuple(sorted(extra.items()))
    + (("allow_internet", env.get("allow_internet", bool, True)),)
    + _warnings(plan, test_plan),
    network="packages" if env.get("allow_internet", bool, True) else False,
    source=str(root),
    format="harbor",
    **{**fields, "env": tuple({**dict(fields["env"]), **_str_env(env.sub("env"))}.items())},
  )
