"""Task format, loaders (ours, Terminal-Bench, Harbor), Dockerfile translation, procedural tasks.

Pure tests: no sandbox. End-to-end grading of loaded folders is in test_verifier_sandbox.py.
"""

import collections
import subprocess

import pytest
from task_files import write

from envs import procedural
from envs.formats import dockerfile
from envs.formats import terminal_bench as formats
from envs.formats.loading import detect_format, load_any, load_tasks
from envs.task import BUILTIN_DIR, DOMAINS, FileEntry, TaskFormatError, load_task

GOOD = {
  "task.toml": """
    id = "t1"
    domain = "text"
    difficulty = 2
    tags = ["a"]
    [timeouts]
    agent_s = 30
    test_s = 20
    [resources]
    memory_mb = 256
    [verifier]
    reward = "fraction"
    [verifier.subscores]
    first = ["test_a*"]
    [[milestones]]
    name = "file"
    check = "test -f out.txt"
    [[constraints]]
    name = "keep"
    kind = "unchanged"
    paths = ["in.txt"]
    [metadata]
    author = "me"
  """,
  "instruction.md": "Do it.\n",
  "environment/setup.sh": "echo hi > in.txt\n",
  "environment/workspace/data/x.csv": "a,b\n",
  "environment/extra.txt": "staged\n",
  "solution/solve.sh": "cp in.txt out.txt\n",
  "tests/test_out.py": "def test_a():\n  pass\n",
}


def test_builtin_suite_size_domains_and_difficulties():
  tasks = load_tasks(BUILTIN_DIR / "core")
  assert len(tasks) >= 60
  by_domain = collections.Counter(t.domain for t in tasks)
  assert len(by_domain) >= 6 and set(by_domain) <= set(DOMAINS)
  assert {t.difficulty for t in tasks} == {1, 2, 3, 4, 5}
  for t in tasks:
    assert t.id.startswith("core/") and t.instruction and t.solution_script.strip()
    assert t.tests.runner == "pytest" and t.tests.files


def test_load_our_format(tmp_path):
  t = load_task(write(tmp_path / "t1", GOOD), suite="s")
  assert t.id == "s/t1" and t.domain == "text" and t.difficulty == 2 and t.tags == ("a",)
  assert (t.agent_timeout_s, t.test_timeout_s, t.resources.memory_mb) == (30.0, 20.0, 256)
  assert t.tests.reward == "fraction" and t.tests.subscores == (("first", ("test_a*",)),)
  assert t.milestones[0].check == "test -f out.txt" and t.constraints[0].paths == ("in.txt",)
  assert [f.path for f in t.workspace_files] == ["data/x.csv"]
  assert [f.path for f in t.setup_files] == ["extra.txt"]
  assert dict(t.metadata) == {"author": "me"} and detect_format(tmp_path / "t1") == "agentrl"


@pytest.mark.parametrize(
  "change, file, field",
  [
    (
      {"task.toml": GOOD["task.toml"].replace('domain = "text"', 'domain = "cooking"')},
      "task.toml",
      "domain",
    ),
    (
      {"task.toml": GOOD["task.toml"].replace("difficulty = 2", "difficulty = 9")},
      "task.toml",
      "difficulty",
    ),
    (
      {"task.toml": GOOD["task.toml"].replace("difficulty = 2", 'difficulty = "2"')},
      "task.toml",
      "difficulty",
    ),
    (
      {"task.toml": GOOD["task.toml"].replace("agent_s = 30", "agent_s = -1")},
      "task.toml",
      "timeouts.agent_s",
    ),
    (
      {"task.toml": GOOD["task.toml"].replace("memory_mb = 256", "memry_mb = 256")},
      "task.toml",
      "resources.memry_mb",
    ),
    (
      {"task.toml": GOOD["task.toml"].replace('reward = "fraction"', 'reward = "best"')},
      "task.toml",
      "verifier.reward",
    ),
    (
      {"task.toml": GOOD["task.toml"].replace('kind = "unchanged"', 'kind = "never"')},
      "task.toml",
      "constraints[0].kind",
    ),
    (
      {"task.toml": GOOD["task.toml"].replace('check = "test -f out.txt"', "")},
      "task.toml",
      "milestones[0].check",
    ),
    ({"task.toml": "bogus = 1\n" + GOOD["task.toml"]}, "task.toml", "bogus"),
    ({"task.toml": "id = [\n"}, "task.toml", "<syntax>"),
    ({"instruction.md": "  \n"}, "instruction.md", "<content>"),
  ],
)
def test_malformed_task_names_file_and_field(tmp_path, change, file, field):
  root = write(tmp_path / "bad", {**GOOD, **change})
  with pytest.raises(TaskFormatError) as e:
    load_task(root)
  assert e.value.file.endswith(file) and e.value.field == field, str(e.value)
  assert file in str(e.value) and field in str(e.value)


def test_missing_parts_named(tmp_path):
  for missing, file in (
    ("solution/solve.sh", "solve.sh"),
    ("tests/test_out.py", "tests"),
    ("instruction.md", "instruction.md"),
  ):
    files = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(TaskFormatError) as e:
      load_task(write(tmp_path / missing.replace("/", "_"), files))
    assert e.value.file.endswith(file), str(e.value)


def test_duplicate_ids_rejected(tmp_path):
  write(tmp_path / "s" / "a", GOOD)
  write(tmp_path / "s" / "b", GOOD)
  with pytest.raises(TaskFormatError, match="duplicate task id"):
    load_tasks(tmp_path)


TB = {
  "task.yaml": """
    instruction: |
      Write hello to /app/out.txt.
    author_email: a@b.c
    difficulty: medium
    category: file-operations
    tags: [shell]
    parser_name: pytest
    max_agent_timeout_sec: 100
    max_test_timeout_sec: 40
  """,
  "Dockerfile": """
    FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620
    WORKDIR /app
    RUN apt-get update && apt-get install -y curl jq \\
        && rm -rf /var/lib/apt/lists/*
    COPY data/ /app/data/
    ENV GREETING=hello
  """,
  "data/in.txt": "x\n",
  "solution.yaml": """
    - command: echo $GREETING > out.txt
      min_timeout_sec: 1
    - "cat out.txt"
  """,
  "run-tests.sh": """
    #!/bin/bash
    curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
    uv run pytest $TEST_DIR/test_outputs.py -rA
  """,
  "tests/test_outputs.py": "from pathlib import Path\ndef test_out():\n  assert Path('/app/out.txt').read_text() == 'hello\\n'\n",
}

HARBOR = {
  "task.toml": """
    version = "1.0"
    [metadata]
    difficulty = "hard"
    category = "debugging"
    tags = ["x"]
    [verifier]
    timeout_sec = 50.0
    [agent]
    timeout_sec = 70.0
    [environment]
    cpus = 1
    memory = "512M"
    storage_mb = 256
  """,
  "instruction.md": "Fix it.\n",
  "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /srv/app\nCOPY src/ ./src/\nRUN mkdir -p logs\n",
  "environment/src/main.sh": "echo main\n",
  "solution/solve.sh": "echo fixed > fixed.txt\n",
  "tests/test.sh": "#!/bin/bash\n[ -f /srv/app/fixed.txt ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
}


def test_terminal_bench_loader(tmp_path):
  root = write(tmp_path / "tb" / "hello-task", TB)
  assert detect_format(root) == "terminal-bench"
  t = load_any(root, suite="tb")
  assert t.id == "tb/hello-task" and t.format == "terminal-bench" and t.domain == "file-operations"
  assert (t.difficulty, t.agent_timeout_s, t.test_timeout_s, t.workdir) == (3, 100.0, 40.0, "/app")
  # TB1 declares no limits (Docker's defaults: none): the replay's largest, not 512 MiB of disk
  assert (t.resources.disk_mb, t.resources.memory_mb) == (4096, 4096)
  assert t.instruction.startswith("Write hello") and dict(t.env) == {"GREETING": "hello"}
  assert t.solution_script == "echo $GREETING > out.txt\ncat out.txt\n"
  # pytest files present: run-tests.sh (uv from the network) is replaced by the offline pytest run.
  assert t.tests.runner == "pytest" and [f.path for f in t.tests.files] == ["test_outputs.py"]
  assert t.tests.rewrite_paths
  # curl is installed as asked; the t-bench base brings its harness tools (tmux, asciinema, curl)
  assert "agentrl_apt 3 curl jq && :" in t.setup_script
  assert t.apt_packages == ("tmux", "asciinema", "curl", "jq")
  assert [f.path.split("/", 2)[2] for f in t.setup_files] == ["in.txt"]
  warnings = dict(t.metadata)["dockerfile_warnings"]
  assert any("python-3-13" in w for w in warnings)


def test_harbor_loader(tmp_path):
  root = write(tmp_path / "hb" / "fix-it", HARBOR)
  assert detect_format(root) == "harbor"
  t = load_any(root)
  assert (
    t.format == "harbor"
    and t.domain == "debugging"
    and t.difficulty == 4
    and t.workdir == "/srv/app"
  )
  assert (t.agent_timeout_s, t.test_timeout_s, t.resources.memory_mb, t.resources.disk_mb) == (
    70.0,
    50.0,
    512,
    256,
  )
  assert t.tests.runner == "shell" and [f.path for f in t.tests.files] == ["test.sh"]
  assert [f.path.split("/", 2)[2] for f in t.setup_files] == ["main.sh"]
  assert "-C /srv/app/src " in t.setup_script and "mkdir -p logs" in t.setup_script


def test_harbor_solution_yaml_and_errors(tmp_path):
  files = {k: v for k, v in HARBOR.items() if k != "solution/solve.sh"}
  files["solution/solution.yaml"] = "- echo a > a.txt\n- command: echo b >> a.txt\n"
  t = load_any(write(tmp_path / "hb2", files))
  assert t.solution_script == "echo a > a.txt\necho b >> a.txt\n"
  bad = dict(files, **{"solution/solution.yaml": "- 3\n"})
  with pytest.raises(TaskFormatError) as e:
    load_any(write(tmp_path / "hb3", bad))
  assert e.value.file.endswith("solution.yaml") and e.value.field == "[0].command"
  bad = dict(
    HARBOR, **{"task.toml": HARBOR["task.toml"].replace('memory = "512M"', 'memory = "lots"')}
  )
  with pytest.raises(TaskFormatError) as e:
    load_any(write(tmp_path / "hb4", bad))
  assert e.value.field == "environment.memory"
  bad = dict(TB, **{"task.yaml": "difficulty: easy\n"})
  with pytest.raises(TaskFormatError) as e:
    load_any(write(tmp_path / "tb2", bad))
  assert e.value.file.endswith("task.yaml") and e.value.field == "instruction"


def _ctx(**files):
  return tuple(FileEntry(k, v.encode()) for k, v in files.items())


def test_dockerfile_translation_steps():
  plan = dockerfile.translate(
    'ARG V=3.12\nFROM python:${V}-slim\nENV A=1 B="two words"\nWORKDIR /app\n'
    "RUN pip install --no-cache-dir pytest==8.1 && apt-get clean\nCOPY src/*.py lib/\n"
    'ADD bundle.tar.gz /app/vendor/\nCOPY notes.txt /tmp/n.txt\nCMD ["bash"]\n',
    _ctx(**{"src/a.py": "a", "src/b.py": "b", "src/c.txt": "c", "notes.txt": "n"})
    + (FileEntry("bundle.tar.gz", _tar({"pkg/x.txt": b"x"})),),
  )
  assert plan.base == "python:3.12-slim" and plan.workdir == "/app"
  assert dict(plan.env) == {"LANG": "C.UTF-8", "A": "1", "B": "two words"}  # python: base ENV
  paths = sorted(f.path.split("/", 2)[2] for f in plan.setup_files)
  assert paths == ["a.py", "b.py", "n.txt", "pkg/x.txt"]
  s = plan.setup_script
  assert "agentrl_pip 5 pytest==8.1 && :" in s and 'tar -C "$SETUP_DIR"/ctx/' in s
  assert "/app/lib" in s and "/app/vendor" in s and "cd /app" in s


def test_dockerfile_run_exec_form_only_for_a_json_array_of_strings():
  """Docker's rule: `RUN ["a", "b"]` is the exec form; `RUN [ -e x ] && ...` (the test command)
  is the shell form, kept as written."""
  plan = dockerfile.translate(
    'FROM debian\nRUN ["touch", "/tmp/a b"]\nRUN [ ! -e /usr/bin/python ] && ln -s /usr/bin/python3 '
    "/usr/bin/python || true\n",
    (),
  )
  s = plan.setup_script
  assert "bash -ec 'touch '\"'\"'/tmp/a b'\"'\"''" in s  # shlex.join of the argv, quoted again
  assert "bash -ec '[ ! -e /usr/bin/python ]  &&  ln -s /usr/bin/python3 /usr/bin/python" in s


def _tar(files: dict[str, bytes]) -> bytes:
  import io
  import tarfile

  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for name, data in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return buf.getvalue()


@pytest.mark.parametrize(
  "text, line, words",
  [
    ("FROM alpine:3.19\n", 1, "not Debian"),
    ("FROM node:20-alpine\n", 1, "not Debian"),
    ("FROM ubuntu\nFROM debian\n", 2, "multi-stage"),
    ("FROM ubuntu\nRUN wget http://example.org/f\n", 2, "network"),
    ("FROM ubuntu\nRUN curl -fsSL http://example.org/x.sh | bash\n", 2, "network"),
    ("FROM ubuntu\n\n# c\nADD https://example.org/f /app/\n", 4, "URL"),
    ("FROM ubuntu\nCOPY --from=build /a /b\n", 2, "multi-stage"),
    ("FROM ubuntu\nCOPY missing.txt /tmp/\n", 2, "no file"),
    ("FROM ubuntu\nFROBNICATE x\n", 2, "unknown instruction"),
  ],
)
def test_dockerfile_errors_name_the_line(text, line, words):
  with pytest.raises(dockerfile.DockerfileError) as e:
    dockerfile.translate(text, _ctx(x="x"), "task/Dockerfile")
  assert e.value.line == line and e.value.field == f"line {line}" and words in str(e.value)
  assert "task/Dockerfile" in str(e.value)


def test_dockerfile_continuations_and_installers():
  plan = dockerfile.translate(
    "FROM debian:bookworm\nWORKDIR /w\nRUN apt-get update \\\n  && apt-get install -y --no-install-recommends \\\n"
    "     git tmux \\\n  && curl -LsSf https://astral.sh/uv/install.sh | sh\nRUN uv venv && uv pip install numpy\n",
    (),
  )
  # tmux is installed as asked (Terminal-Bench tasks test for it); the uv installer is dropped.
  assert "agentrl_apt 3 git tmux && :" in plan.setup_script
  assert "agentrl_pip 7 numpy" in plan.setup_script
  assert any("uv venv" in w for w in plan.warnings)
  assert not any("tmux" in w for w in plan.warnings)
  strict = dockerfile.translate("FROM debian\nRUN apt-get install -y tmux\n", (), strict=True)
  assert strict.apt_packages == ("tmux",)


def test_tbench_base_brings_its_harness_tools():
  """t-bench's base images are a public image plus tmux, asciinema and curl (its harness's)."""
  plan = dockerfile.translate(
    "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\nRUN apt-get install -y git\n", ()
  )
  assert {"tmux", "asciinema", "curl", "git"} <= set(plan.apt_packages)
  assert "agentrl_apt 1 tmux asciinema curl" in plan.setup_script


def test_tb_tests_without_pytest_use_the_script(tmp_path):
  files = {k: v for k, v in TB.items() if not k.startswith("tests/")}
  files["tests/expected.txt"] = "hello\n"
  with pytest.raises(TaskFormatError, match="runs pytest but tests/ holds no test_"):
    formats.load_terminal_bench(write(tmp_path / "tb3", files))
  files["run-tests.sh"] = (
    "#!/bin/bash\ncurl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh\n"
    "diff $TEST_DIR/expected.txt /app/out.txt && echo 1 > /logs/verifier/reward.txt\n"
  )
  t = formats.load_terminal_bench(write(tmp_path / "tb4", files))
  assert t.tests.runner == "shell" and {f.path for f in t.tests.files} == {
    "expected.txt",
    "tb1-run-tests.sh",
    "test.sh",
  }
  script = next(f for f in t.tests.files if f.path == "tb1-run-tests.sh").data.decode()
  assert (
    script == "diff $TEST_DIR/expected.txt /app/out.txt && echo 1 > /logs/verifier/reward.txt\n"
  )
  # test.sh runs it and scores it with TB1's pytest parser (task.yaml parser_name)
  assert next(f for f in t.tests.files if f.path == "test.sh").data == (
    formats.TB1_PYTEST_PARSER.encode()
  )
  files["task.yaml"] = TB["task.yaml"].replace("parser_name: pytest", "parser_name: swebench")
  with pytest.raises(TaskFormatError, match="parser_name.*'swebench' is not supported"):
    formats.load_terminal_bench(write(tmp_path / "tb5", files))


def test_procedural_families_are_deterministic_and_fresh():
  assert len(procedural.FAMILIES) >= 4
  for fam in procedural.FAMILIES:
    a, b, c = procedural.generate(fam, 1), procedural.generate(fam, 1), procedural.generate(fam, 2)
    assert a == b and a.id == f"procedural/{fam}-1"
    assert (a.instruction, a.workspace_files) != (c.instruction, c.workspace_files)
    f = a.tests.files[0]
    if a.tests.runner == "shell":  # a bash script that parses
      assert f.path == "test.sh" and f.mode & 0o111
      subprocess.run(["bash", "-n"], input=f.data, check=True)
    else:
      compile(f.data, "test_task.py", "exec")
  ids = {t.instruction for t in procedural.sample(200, seed=3, families=["echo_word"])}
  assert len(ids) == 200


def test_echo_word_family_is_regular():
  import re

  for t in procedural.sample(50, seed=0, families=["echo_word"]):
    m = re.fullmatch(
      r"Create a file named ([a-z]+)\.txt containing exactly the word ([a-z]+)\.", t.instruction
    )
    assert m, t.instruction
    assert t.solution_script == f"echo {m.group(2)} > {m.group(1)}.txt\n"


def test_scripted_agent_command_files(tmp_path):
  from envs.agents.scripted import ScriptedAgent, load_commands

  text = "# comment\n\necho a \\\n  b\ncat > f.txt <<'EOF'\nline 1\n\nline 2\nEOF\nls\n"
  (tmp_path / "cmds.sh").write_text(text)
  assert load_commands(tmp_path / "cmds.sh") == [
    "echo a \\\n  b",
    "cat > f.txt <<'EOF'\nline 1\n\nline 2\nEOF",
    "ls",
  ]
  (tmp_path / "cmds.yaml").write_text("- echo 1\n- command: echo 2\n  min_timeout_sec: 3\n")
  agent = ScriptedAgent.from_file(tmp_path / "cmds.yaml")
  assert agent.commands_for(None) == ["echo 1", "echo 2"] and agent.name == "scripted:cmds.yaml"
  (tmp_path / "cmds.json").write_text('["pwd", {"command": "id"}]')
  assert load_commands(tmp_path / "cmds.json") == ["pwd", "id"]
  (tmp_path / "bad.json").write_text("[1]")
  with pytest.raises(ValueError, match="item 0"):
    load_commands(tmp_path / "bad.json")


def test_harbor_2_1_schema_env_and_gpus(tmp_path):
  files = dict(HARBOR)
  files["task.toml"] = (
    'schema_version = "1.1"\n[task]\nname = "terminal-bench/x"\n[metadata]\ndifficulty = "easy"\n'
    '[environment]\ngpus = 0\n[environment.env]\nMODE = "slow"\n'
  )
  t = load_any(write(tmp_path / "h21", files))
  assert t.format == "harbor" and dict(t.env)["MODE"] == "slow"
  files["task.toml"] = files["task.toml"].replace("gpus = 0", "gpus = 1")
  with pytest.raises(TaskFormatError, match="environment.gpus.*GPU"):
    load_any(write(tmp_path / "h22", files))


def test_test_script_split_names_network_lines():
  from envs.formats import test_script

  s = test_script.parse(
    "#!/bin/bash\nset -e\napt-get update\ncd /app\nuv add requests numpy\n"
    "uv run pytest /tests -rA\n./custom_check.sh\n",
    "test.sh",
  )
  assert s.runs_pytest and s.set_e and s.pip_packages == ("requests", "numpy")
  assert s.pre == "set -e\ncd /app\n" and s.post == "./custom_check.sh\n"
  with pytest.raises(TaskFormatError, match="line 3.*network"):
    test_script.parse("cd /app\npytest\nwget http://example.org/x\n", "test.sh")
  with pytest.raises(TaskFormatError, match="line 2.: a second pytest run"):
    test_script.parse("pytest a\npython3 -m pytest b\n", "test.sh")
