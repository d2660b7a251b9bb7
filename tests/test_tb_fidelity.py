"""Terminal-Bench fidelity, round 3 (issue 37): patterns of real TB1/TB2 task folders, written
here, loaded and graded as their own harness would (TB1's standard runner, BuildKit heredocs,
the build context, apt/pip semantics, errors kept in the results)."""

import pytest
from task_files import write

from envs import eval as ev
from envs.formats import test_script
from envs.formats.loading import load_any

# TB1's standard runner: run-tests.sh sources a set-up helper (uv and pytest from the network)
# and calls a run helper (pytest over $TEST_DIR/test_outputs.py); 28 of 42 dev tasks use it.
TB1_STANDARD = {
  "task.yaml": "instruction: Write the word ok to /app/out.txt.\ndifficulty: easy\n",
  "Dockerfile": "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\nWORKDIR /app\n",
  "solution.sh": "#!/bin/bash\necho ok > /app/out.txt\n",
  "run-tests.sh": """
    #!/bin/bash

    # You can modify anything in this script. Just make sure it generates test output that
    # is parsed by a parser (PytestParser by default).

    source $TEST_DIR/setup-uv-pytest.sh
    bash $TEST_DIR/run-uv-pytest.sh
  """,
  "tests/setup-uv-pytest.sh": """
    #!/bin/bash

    # Install curl
    apt-get update
    apt-get install -y curl

    # Install uv
    curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh

    source $HOME/.local/bin/env

    # Check if we're in a valid working directory
    if [ "$PWD" = "/" ]; then
        echo "Error: No working directory set. Please set a WORKDIR in your Dockerfile before running this script."
        exit 1
    fi

    uv init
    uv add pytest==8.4.1
  """,
  "tests/run-uv-pytest.sh": """
    #! /bin/bash

    uv run pytest $TEST_DIR/test_outputs.py -rA
  """,
  "tests/test_outputs.py": """
    from pathlib import Path

    def test_out():
        assert Path("/app/out.txt").read_text() == "ok\\n"
  """,
}


def test_tb1_standard_runner_is_followed_into_its_helpers(tmp_path):
  task = load_any(write(tmp_path / "tb1-std", TB1_STANDARD))
  assert task.tests.runner == "pytest", task.tests
  assert task.tests.pre_script == "" and task.tests.post_script == ""
  notes = dict(task.metadata)["dockerfile_warnings"]
  assert any("tests/run-uv-pytest.sh line 3: uv run pytest" in n for n in notes), notes
  oracle = ev.evaluate([task], ev.make_agent("oracle"), ev.EvalConfig())[0]
  assert oracle["passed"], oracle["detail"]
  null = ev.evaluate([task], ev.make_agent("null"), ev.EvalConfig())[0]
  assert not null["passed"] and null["failure_mode"] not in ("task_error", "infra"), null


def test_helpers_sourced_or_called_keep_their_shell_scope():
  helpers = {
    "prep.sh": "export WANT=1\ncp /tests/data.txt /app/\n",
    "run.sh": "cd /app/sub\nexport X=2\npytest $TEST_DIR/test_outputs.py\necho done\n",
  }
  s = test_script.parse(". /tests/prep.sh\nbash ${TEST_DIR}/run.sh\n", "run-tests.sh", helpers)
  assert s.runs_pytest
  # sourced: same shell; called: each kept command in a subshell, as `bash FILE` would
  assert s.pre == "export WANT=1\ncp /tests/data.txt /app/\n(\ncd /app/sub\n)\n(\nexport X=2\n)\n"
  assert s.post == "(\necho done\n)\n"
  # a helper that is not in the test folder is an ordinary command
  kept = test_script.parse("bash /tests/missing.sh\n", "run-tests.sh", helpers)
  assert not kept.runs_pytest and "missing.sh" in kept.shell


# BuildKit heredocs: COPY of inline files (expanded unless the delimiter is quoted, `<<-` strips
# tabs, several on one line), a bare `RUN <<EOF` script (no -e; its apt line is a package), a
# `#!` script, and a command reading a heredoc.
HEREDOCS = {
  "task.toml": 'version = "1.0"\n[metadata]\ndifficulty = "easy"\n',
  "instruction.md": "Write the word ok to /app/out.txt.\n",
  "environment/Dockerfile": (
    "FROM python:3.11-slim\nWORKDIR /app\nARG GREET=hi\n"
    "COPY <<EOT /app/hello.txt\n$GREET there\nEOT\n"
    'COPY <<a.txt <<-"b.txt" /app/conf/\none ${GREET}\na.txt\n\tb $GREET\n\tb.txt\n'
    "RUN <<EOF\napt-get update\nfalse\necho run > /app/run.txt\nEOF\n"
    "RUN <<-'EOF'\n\t#!/usr/bin/env python3\n\topen('/app/py.txt', 'w').write('py')\n\tEOF\n"
    "RUN cat <<X > /app/shell.txt\nfrom $GREET\nX\n"
  ),
  "solution/solve.sh": "echo ok > /app/out.txt\n",
  "tests/test_outputs.py": """
    from pathlib import Path

    def test_files():
        read = lambda p: Path("/app", p).read_text()
        assert read("hello.txt") == "hi there\\n"
        assert read("conf/a.txt") == "one hi\\n" and read("conf/b.txt") == "b $GREET\\n"
        assert read("run.txt") == "run\\n" and read("py.txt") == "py"
        assert read("shell.txt") == "from hi\\n"
        assert read("out.txt") == "ok\\n"
  """,
}


def test_buildkit_heredocs_are_replayed(tmp_path):
  task = load_any(write(tmp_path / "heredocs", HEREDOCS))
  oracle = ev.evaluate([task], ev.make_agent("oracle"), ev.EvalConfig())[0]
  assert oracle["passed"], oracle["detail"]


# The build context is the whole task folder less .dockerignore: a COPY naming a harness file
# gets it; a folder COPY leaves the harness files out (the agent never sees the answer).
CONTEXT = {
  "task.yaml": "instruction: Write the word ok to /app/out.txt.\ndifficulty: easy\n",
  "Dockerfile": (
    "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\nWORKDIR /app\n"
    "COPY solution.sh run-tests.sh ./harness/\nCOPY tests/data.txt ./\nCOPY . ./all/\n"
  ),
  ".dockerignore": "# local files\nsecret*\n!secret-ok.txt\n",
  "secret.txt": "no\n",
  "secret-ok.txt": "yes\n",
  "notes.txt": "n\n",
  "solution.sh": "#!/bin/bash\necho ok > /app/out.txt\n",
  "run-tests.sh": "#!/bin/bash\npytest $TEST_DIR/test_outputs.py -rA\n",
  "tests/data.txt": "d\n",
  "tests/test_outputs.py": """
    from pathlib import Path

    def test_context():
        assert Path("/app/harness/solution.sh").is_file() and Path("/app/data.txt").is_file()
        assert Path("/app/harness/run-tests.sh").is_file()
        names = {p.name for p in Path("/app/all").iterdir()}
        assert {"notes.txt", "secret-ok.txt", "task.yaml", "Dockerfile"} <= names, names
        assert not names & {"secret.txt", "solution.sh", "run-tests.sh", "tests"}, names
        assert Path("/app/out.txt").read_text() == "ok\\n"
  """,
}


def test_build_context_is_the_task_folder_less_dockerignore(tmp_path):
  task = load_any(write(tmp_path / "context", CONTEXT))
  oracle = ev.evaluate([task], ev.make_agent("oracle"), ev.EvalConfig())[0]
  assert oracle["passed"], (oracle["detail"], oracle["tests"])


def test_packages_that_do_not_exist_are_the_tasks_error(tmp_path):
  """Real apt-get (simulated install, no network) and pip (no index) say what is missing; the
  layer builder turns that into PackageMissingError (task_error at once, never retried)."""
  import subprocess
  import sys

  from envs.sandbox import layers

  def stderr(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300).stderr

  apt = stderr(["apt-get", "install", "-s", "agentrl-no-such-pkg", "bash=0.0.0-agentrl"])
  assert layers.missing_packages("apt", apt) in (
    ["no package agentrl-no-such-pkg"],  # apt stops at the first error it meets
    ["no version 0.0.0-agentrl of bash"],
    ["no package agentrl-no-such-pkg", "no version 0.0.0-agentrl of bash"],
  ), apt
  pip = [sys.executable, "-m", "pip", "install", "--no-index", "--target", str(tmp_path)]
  assert layers.missing_packages("pip", stderr([*pip, "agentrl-no-such-pkg==1.0"])) == [
    "no distribution of agentrl-no-such-pkg==1.0"
  ]
  assert layers.missing_packages("pip", stderr([*pip, "-r", str(tmp_path / "nope.txt")]))
  assert layers.missing_packages("pip", "ERROR: network unreachable") == []


def _harbor(dockerfile: str, test: str) -> dict:
  return {
    "task.toml": 'version = "1.0"\n[metadata]\ndifficulty = "easy"\n',
    "instruction.md": "Write ok to /app/out.txt.\n",
    "environment/Dockerfile": dockerfile,
    "solution/solve.sh": "echo ok > /app/out.txt\n",
    "tests/test_outputs.py": test,
  }


def test_why_a_task_failed_is_kept_and_shown(tmp_path):
  """Load, set-up and test errors: in results.json (each failed test's message, a tail of the
  runner's output), on the console, in summary.md and in report.html."""
  import json
  import subprocess
  import sys

  root = tmp_path / "why"
  test = "def test_x():\n    print('runner-says-hello')\n    assert 1 == 2, 'wanted-two-got-one'\n"
  write(root / "fails", _harbor("FROM ubuntu:24.04\nWORKDIR /app\n", test))
  setup = "FROM ubuntu:24.04\nWORKDIR /app\nRUN echo setup-broke-here >&2; exit 3\n"
  write(root / "setup", _harbor(setup, "def test_x():\n    pass\n"))
  write(root / "broken", {**_harbor("FROM ubuntu:24.04\n", ""), "task.toml": "version = [\n"})
  out = tmp_path / "out"
  cmd = [sys.executable, "-m", "launch.eval", f"--tasks={root}", "--agent=oracle", f"--out={out}"]
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
  rows = {t["task_id"]: t for t in json.loads((out / "results.json").read_text())["trials"]}
  fails = rows["why/fails"]
  assert fails["tests"] == [
    {"name": "test_outputs::test_x", "outcome": "failed", "message": fails["tests"][0]["message"]}
  ]
  assert "wanted-two-got-one" in fails["tests"][0]["message"]
  assert "runner-says-hello" in fails["test_output"] and "1 failed" in fails["test_output"]
  assert rows["why/setup"]["failure_mode"] == "task_error" and rows["why/setup"]["attempts"] == 1
  shown = {
    "console": r.stderr,
    "summary.md": (out / "summary.md").read_text(),
    "report.html": (out / "report.html").read_text(),
  }
  for where, text in shown.items():
    assert "wanted-two-got-one" in text, where
    assert "setup-broke-here" in text, where
    assert "invalid TOML" in text, where


def test_a_model_file_ending_in_pth_is_not_tampering(tmp_path):
  """The task asks for a PyTorch model (model.pth); only a .pth in a site folder is a hook."""
  task = _harbor(
    "FROM python:3.11-slim\nWORKDIR /app\n",
    "from pathlib import Path\n\ndef test_model():\n    assert Path('/app/model.pth').is_file()\n",
  )
  task["solution/solve.sh"] = (
    "mkdir -p models && printf 'weights' > model.pth && cp model.pth models/\n"
  )
  hook = dict(task)
  hook["solution/solve.sh"] = (
    "mkdir -p venv/lib/python3.11/site-packages && echo 'import os' > "
    "venv/lib/python3.11/site-packages/x.pth && printf w > model.pth\n"
  )
  tasks = [load_any(write(tmp_path / n, t)) for n, t in (("model", task), ("hook", hook))]
  model, planted = ev.evaluate(tasks, ev.make_agent("oracle"), ev.EvalConfig())
  assert model["passed"] and model["failure_mode"] == "none", model["detail"]
  assert "site-packages/x.pth" in planted["detail"], planted["detail"]


def test_pip_arguments_are_parsed_as_pip_does():
  """Index options take a value (never a package; the layer uses this machine's pip sources),
  -r/-c files come from the build context, specifiers and extras are kept, flags are flags."""
  from envs.formats import dockerfile
  from envs.task import FileEntry

  context = (
    FileEntry("deps/requirements.txt", b"# pinned\nrequests==2.32.4  # http\n-c constraints.txt\n"),
    FileEntry("constraints.txt", b"six==1.16.0\n"),
  )
  plan = dockerfile.translate(
    "FROM python:3.12-slim\nWORKDIR /app\nCOPY deps/ ./\n"
    "RUN pip install torch==2.7.1+cpu --index-url https://index.example/whl/cpu\n"
    "RUN pip3 install --break-system-packages --pre -f /wheels --extra-index-url=https://x.example "
    "'pandas[excel]>=2.0,<3' numpy -r requirements.txt -c constraints.txt six\n"
    "RUN python3 -m pip install -i https://index.example/simple --no-cache-dir -U flask==3.0.0\n",
    context,
  )
  assert plan.pip_packages == (
    "pip",  # the python image's own
    "torch==2.7.1",
    "pandas[excel]>=2.0,<3",
    "numpy",
    "six==1.16.0",
    "requests==2.32.4",
    "flask==3.0.0",
  ), plan.pip_packages
  notes = "\n".join(plan.warnings)
  assert "--index-url https://index.example/whl/cpu: packages come from this machine" in notes
  assert "local version label dropped" in notes and "--pre" in notes
  script = test_script.parse(
    "pip install torch==2.7.0 --index-url https://index.example/whl/cpu\n"
    "uv add 'scipy>=1.11' --extra-index-url https://x.example\npytest /tests/test_outputs.py\n",
    "run-tests.sh",
  )
  assert script.pip_packages == ("torch==2.7.0", "scipy>=1.11")


APT_SEMANTICS = {  # four dev-set tasks: gcc without libc6-dev (no stdio.h); a slim image's man1
  "task.yaml": "instruction: Run /app/hi and write what it prints to /app/out.txt.\n",
  "Dockerfile": (
    "FROM python:3.13-slim\nWORKDIR /app\n"
    "RUN apt-get update && apt-get install -y gcc && rm -rf /var/lib/apt/lists/*\n"
    "RUN apt-get install -y --no-install-recommends dos2unix\n"
    "RUN printf '#include <stdio.h>\\nint main(void) { puts(\"hi\"); return 0; }\\n' > hi.c "
    "&& gcc hi.c -o hi\n"
    "RUN echo '.TH X 1' > x.1 && mv x.1 /usr/share/man/man1/x.1\n"
  ),
  "solution.sh": "#!/bin/bash\n/app/hi > /app/out.txt\n",
  "run-tests.sh": "#!/bin/bash\npytest $TEST_DIR/test_outputs.py -rA\n",
  "tests/test_outputs.py": """
    from pathlib import Path

    def test_out():
        assert Path("/app/out.txt").read_text() == "hi\\n"
        assert Path("/usr/share/man/man1/x.1").is_file()
  """,
}


def test_apt_installs_recommends_unless_the_line_says_not(tmp_path):
  task = load_any(write(tmp_path / "apt", APT_SEMANTICS))
  assert set(task.apt_packages) >= {"gcc", "dos2unix"} and task.apt_no_recommends == ("dos2unix",)
  oracle = ev.evaluate([task], ev.make_agent("oracle"), ev.EvalConfig())[0]
  assert oracle["passed"], oracle["detail"]


# ------------------------------------------------ symlinks out of a task folder (issue 36.3)

HARBOR_OK = _harbor("FROM ubuntu:24.04\nWORKDIR /app\n", "def test_x():\n    pass\n")
NATIVE_OK = {
  "task.toml": 'id = "n"\ndomain = "shell"\ndifficulty = 1\n',
  "instruction.md": "Do it.\n",
  "solution.sh": "true\n",
  "tests/test_x.py": "def test_x():\n    pass\n",
}
LINK_PLACEMENTS = [
  ("harbor", "instruction.md"),
  ("harbor", "task.toml"),
  ("harbor", "tests"),
  ("harbor", "tests/test_outputs.py"),
  ("harbor", "environment"),
  ("harbor", "environment/Dockerfile"),
  ("harbor", "solution"),
  ("harbor", "solution/solve.sh"),
  ("tb1", "task.yaml"),
  ("tb1", "Dockerfile"),
  ("tb1", "solution.sh"),
  ("tb1", "run-tests.sh"),
  ("tb1", "tests"),
  ("tb1", "tests/setup-uv-pytest.sh"),
  ("tb1", "docker-compose.yaml"),
  ("native", "instruction.md"),
  ("native", "tests"),
  ("native", "solution.sh"),
]


@pytest.mark.parametrize("fmt,rel", LINK_PLACEMENTS, ids=[f"{f}:{r}" for f, r in LINK_PLACEMENTS])
def test_a_link_in_a_task_folder_is_a_load_error(tmp_path, fmt, rel):
  import os
  import shutil

  from envs.formats.loading import resolve
  from envs.task import TaskFormatError

  secret = write(
    tmp_path / "host", {"secret.txt": "HOST-SECRET\n", "dir/secret.txt": "HOST-SECRET\n"}
  )
  files = {"harbor": HARBOR_OK, "tb1": TB1_STANDARD, "native": NATIVE_OK}[fmt]
  root = write(tmp_path / "suite" / "t", files)
  target = root / rel
  is_dir = target.is_dir()
  if target.exists():
    shutil.rmtree(target) if is_dir else target.unlink()
  os.symlink(secret / ("dir" if is_dir else "secret.txt"), target)
  with pytest.raises(TaskFormatError) as e:
    load_any(root)
  assert rel in str(e.value) and "symbolic link" in str(e.value), str(e.value)
  assert "outside" in str(e.value) and "HOST-SECRET" not in str(e.value)
  tasks, errors = resolve(str(tmp_path / "suite"))  # a suite gets a load_error and goes on
  assert not tasks and [e.record()["failure_mode"] for e in errors] == ["load_error"]
  assert rel in errors[0].reason and "HOST-SECRET" not in errors[0].reason


# ------------------------------------------------ python:* images have pip (issue 37, round 4)

PIP_ON_PYTHON = {  # tb1-dev heterogeneous-dates: `RUN pip install ...` on t-bench's python-3-13
  "task.yaml": "instruction: Report pip's version in /app/pip.txt.\n",
  "Dockerfile": (
    "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\nWORKDIR /app\nRUN pip install six\n"
  ),
  "solution.sh": (
    "#!/bin/bash\nfor p in pip pip3 'python -m pip'; do $p --version >> /app/pip.txt; done\n"
    "pip install six > /app/install.txt 2>&1\n"
  ),
  "run-tests.sh": "#!/bin/bash\npytest $TEST_DIR/test_outputs.py -rA\n",
  "tests/test_outputs.py": """
    from pathlib import Path

    def test_pip():
        lines = Path("/app/pip.txt").read_text().splitlines()
        assert len(lines) == 3 and all(l.startswith("pip ") for l in lines), lines
        assert "already satisfied" in Path("/app/install.txt").read_text()
  """,
}
MARKER_ON_DEBIAN = {  # Debian's python3 is externally managed in the public image too
  **PIP_ON_PYTHON,
  "Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
  "solution.sh": "#!/bin/bash\ntrue\n",
  "tests/test_outputs.py": """
    import glob, shutil

    def test_marker():
        assert glob.glob("/usr/lib/python3*/EXTERNALLY-MANAGED") and not shutil.which("pip")
  """,
}


def test_python_images_have_pip_and_debian_keeps_its_marker(tmp_path):
  """python:* images carry pip (pip, pip3, python -m pip) for their Python, with no
  EXTERNALLY-MANAGED marker, so `pip install` works as in Docker; Debian's python3 keeps it."""
  tasks = [
    load_any(write(tmp_path / n, t)) for n, t in (("py", PIP_ON_PYTHON), ("deb", MARKER_ON_DEBIAN))
  ]
  for row in ev.evaluate(tasks, ev.make_agent("oracle"), ev.EvalConfig()):
    assert row["passed"], (row["task_id"], row["detail"], row.get("test_output"))


# ------------------------------------ a python image's own paths name the replayed Python's

BROKEN_PIP = {  # tb1-dev broken-python: the Dockerfile deletes the python image's pip
  "task.yaml": "instruction: I can't seem to install packages with pip.\n",
  "Dockerfile": (
    "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\nWORKDIR /app\n"
    "RUN cp -a /usr/local/lib/python3.13/site-packages/pip /opt/pip\n"
    "RUN rm -rf /usr/local/lib/python3.13/site-packages/pip\n"
  ),
  # the workspace comes last on the tests' sys.path: a pip there does not touch the system
  # folders (get-pip.py's reinstall would, and its host is not a package source)
  "solution.sh": "#!/bin/bash\ncp -a /opt/pip /app/pip\n",
  "run-tests.sh": "#!/bin/bash\npip install pytest==8.4.1\npytest $TEST_DIR/test_outputs.py -rA\n",
  "tests/test_outputs.py": """
    import os, shutil, subprocess, sys

    def test_pip():
        import pip  # noqa: F401
        r = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
        assert r.returncode == 0, r.stderr

    def test_python_paths():
        real = os.path.realpath
        assert real(shutil.which("python3.13")) == real(sys.executable)
        assert real(shutil.which("pip3.13")) == real(shutil.which("pip3"))
  """,
}


def test_python_image_paths_name_the_replayed_python(tmp_path):
  """`rm -rf /usr/local/lib/python3.13/site-packages/pip` removes the pip the tests use, as in
  the python:3.13 image (the replay's Python is the base image's python3, its pip in the
  package layer; the `rm` of a system path was dropped as a cache clean-up): the no-op agent
  fails, a pip put back passes."""
  task = load_any(write(tmp_path / "broken-pip", BROKEN_PIP))
  oracle, null = (
    ev.evaluate([task], ev.make_agent(agent), ev.EvalConfig())[0] for agent in ("oracle", "null")
  )
  assert oracle["passed"], (oracle["detail"], oracle.get("flags"), oracle.get("test_output"))
  assert not null["passed"] and null["failure_mode"] == "tests_failed", null["detail"]
  assert "No module named 'pip'" in null["test_output"], null["test_output"]
