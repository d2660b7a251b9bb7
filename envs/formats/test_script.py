"""Splits a format's test script (TB1 `run-tests.sh`, Harbor `tests/test.sh`) into what runs.

Those scripts mix network boilerplate (fetch uv or curl, make a venv, install pytest and a
CTRF plugin, run pytest through `uvx`/`uv run`, turn its exit code into reward.txt) with
task-specific steps (copy a file from /tests into the workspace, export a variable, run a
custom check). Offline, only the boilerplate is replaced, by the verifier's own pytest run;
every other command still runs, in order:

    pre      commands before the pytest invocation (same shell, so exports reach pytest)
    pytest   the invocation itself, replaced; its `--with PKG` / `uv add PKG` extras become
             test-time pip packages (installed with the task's image layer)
    post     commands after it (each must succeed for a pass)

A script without a pytest invocation is kept whole (less its boilerplate) as a `shell` runner.
A command that needs the network and is not boilerplate fails loudly, naming the line.

Helpers the script sources or calls from the test folder (`source $TEST_DIR/setup-uv-pytest.sh`,
`bash /tests/run-uv-pytest.sh`: TB1's standard runner) are followed and split the same way, so
the install-then-pytest pattern is found wherever it is; the kept commands of a *called* helper
run in a subshell each (its `cd` and exports do not leak, as with `bash FILE`).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterator, Mapping

from envs.formats.docker_packages import pip_install
from envs.task import TaskFormatError

# Test tooling a script installs for itself: the verifier brings its own pytest.
TOOLING = re.compile(r"^(pytest(-json-ctrf|-json-report|-timeout)?|pip|uv|setuptools|wheel)$")
_OPEN = re.compile(r"^(if|for|while|until|case|select|\{)$")
_CLOSE = {"fi", "done", "esac", "}"}
_NETWORK = re.compile(r"\b(curl|wget|git\s+clone|pip3?\s+download)\b|https?://")
_REWARD = re.compile(r"reward\.(txt|json)\b")


@dataclasses.dataclass(frozen=True)
class TestScript:
  """What an imported test script becomes."""

  __test__ = False  # not a pytest class

  runs_pytest: bool
  pre: str = ""
  post: str = ""
  shell: str = ""  # the whole kept script when it does not run pytest
  pip_packages: tuple[str, ...] = ()
  apt_packages: tuple[str, ...] = ()
  set_e: bool = False
  dropped: tuple[str, ...] = ()  # "line N: text" of every replaced boilerplate command


def _words(text: str) -> list[str]:
  """Shell words of a line with quoted strings and comments blanked (keyword counting only)."""
  text = re.sub(r"'[^']*'|\"(\\.|[^\"\\])*\"", " q ", text)
  text = text.split(" #", 1)[0] if not text.lstrip().startswith("#") else ""
  return re.split(r"[\s;&|()]+", text.strip())


def commands(script: str) -> list[tuple[int, str]]:
  """(first line, text) of each top-level command: continuations, heredocs, blocks folded."""
  out, buf, start, depth, heredoc = [], [], 0, 0, None
  for no, line in enumerate(script.splitlines(), 1):
    if heredoc is not None:
      buf.append(line)
      if line.strip() == heredoc:
        heredoc = None
        if depth == 0:
          out.append((start, "\n".join(buf)))
          buf = []
      continue
    if not buf and (not line.strip() or line.lstrip().startswith("#")):
      continue
    if not buf:
      start = no
    buf.append(line)
    m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
    if m:
      heredoc = m.group(1)
      continue
    if line.rstrip().endswith("\\"):
      continue
    for w in _words(line):
      if _OPEN.match(w):
        depth += 1
      elif w in _CLOSE:
        depth -= 1
    if depth <= 0:
      depth = 0
      out.append((start, "\n".join(buf)))
      buf = []
  if buf:
    out.append((start, "\n".join(buf)))
  return out


def _raw_argv(cmd: str) -> list[str]:
  try:
    return shlex.split(cmd.replace("\\\n", " "), comments=True)
  except ValueError:
    return []


def _argv(cmd: str) -> list[str]:
  argv = _raw_argv(cmd)
  while argv and (re.match(r"^\w+=", argv[0]) or argv[0] in ("sudo", "env", "exec", "-E")):
    argv = argv[1:]
  return argv


def _pytest_extras(argv: list[str]) -> list[str] | None:
  """The `--with` packages of a pytest invocation, or None if `argv` does not run pytest."""
  prog = argv[0] if argv else ""
  runs = False
  if prog in ("pytest", "py.test"):
    runs = True
  elif re.fullmatch(r"python3?(\.\d+)?", prog) and argv[1:3] == ["-m", "pytest"]:
    runs = True
  elif prog == "uvx" or argv[:2] == ["uv", "run"] or argv[:2] == ["uv", "tool"]:
    runs = "pytest" in argv or "py.test" in argv
  if not runs:
    return None
  extras, it = [], iter(argv)
  for a in it:
    if a == "--with":
      extras += [x.strip() for x in next(it, "").split(",") if x.strip()]
    elif a.startswith("--with="):
      extras += [x.strip() for x in a[7:].split(",") if x.strip()]
  return extras


def _name(req: str) -> str:
  return re.split(r"[<>=!~\[; @]", req, maxsplit=1)[0].strip().lower()


def _packages(argv: list[str]) -> tuple[str, list[str]] | None:
  """('pip' | 'apt', packages) for an install command line, or None."""
  # one command only: stop at a `;`/`&&`/`||`/`|` and skip redirections (`>/dev/null 2>&1`)
  cut = next(
    (i for i, a in enumerate(argv) if a in (";", "&&", "||", "|") or a.endswith(";")), None
  )
  argv = [a for a in argv[:cut] if not re.match(r"^(\d*|&)[<>]", a)]
  if argv[:2] in (["apt-get", "install"], ["apt", "install"]) or (
    argv[:1] in (["apt-get"], ["apt"]) and "install" in argv
  ):
    return "apt", [a.split("=")[0] for a in argv[1:] if not a.startswith("-") and a != "install"]
  # pip's own options parsed (an --index-url's URL is no package; the layer uses this machine's
  # pip sources); `uv add PKG` is a pip install of PKG
  pi = pip_install(["pip", "install", *argv[2:]] if argv[:2] == ["uv", "add"] else argv)
  if pi is not None:
    return "pip", pi.reqs
  return None


def _boilerplate(cmd: str, argv: list[str], after_pytest: bool) -> bool:
  """Commands that only fetch or set up test tooling, or turn pytest's exit code into a reward."""
  if not argv:
    return False
  prog = argv[0]
  if prog in ("apt-get", "apt") and any(a in ("update", "clean", "autoremove") for a in argv):
    return True
  if re.search(r"\b(curl|wget)\b[^|]*\|\s*(ba|z)?sh\b", cmd) and re.search(r"astral\.sh|uv", cmd):
    return True
  if prog in ("source", ".") and re.search(r"\.local/bin/env|/bin/activate", cmd):
    return True
  if argv[:2] in (["uv", "init"], ["uv", "venv"], ["uv", "sync"]) or prog == "deactivate":
    return True
  if prog == "if" and "$PWD" in cmd and re.search(r"WORKDIR|working directory", cmd):
    return True  # the TB1 template's "no WORKDIR set" guard
  if after_pytest and _REWARD.search(cmd) and not _NETWORK.search(cmd):
    return True  # the pytest exit code -> reward file block: the verifier scores pytest itself
  return bool(re.fullmatch(r"[\w]+=\$\?", cmd.strip()))


_HELPER = re.compile(r"^(?:\$\{?TEST_DIR\}?|/tests)/(?P<rel>[\w./-]+)$")
_MAX_DEPTH = 4


def _helper(argv: list[str], helpers: Mapping[str, str]) -> tuple[str, bool] | None:
  """(test-folder path, called) when `argv` sources or runs a script of the test folder."""
  if len(argv) < 2:
    return None
  if argv[0] in ("source", "."):
    called = False
  elif argv[0] in ("bash", "sh") and not argv[1].startswith("-"):
    called = True
  else:
    return None
  m = _HELPER.match(argv[1])
  rel = m.group("rel").lstrip("./") if m else None
  return (rel, called) if rel in helpers else None


def _expand(
  script: str, where: str, helpers: Mapping[str, str], depth: int = 0
) -> Iterator[tuple[str, str, bool]]:
  """(location, command, in a subshell) of every command, test-folder helpers inlined."""
  for no, cmd in commands(script):
    h = _helper(_raw_argv(cmd), helpers)
    if h is None or depth >= _MAX_DEPTH:
      yield f"{where}line {no}", cmd, False
      continue
    rel, called = h
    for loc, c, sub in _expand(helpers[rel], f"tests/{rel} ", helpers, depth + 1):
      yield loc, c, sub or called


def parse(script: str, file: str, helpers: Mapping[str, str] | None = None) -> TestScript:
  """Splits a test script; TaskFormatError names the line of a command that cannot be kept."""
  pre: list[str] = []
  post: list[str] = []
  pip: list[str] = []
  apt: list[str] = []
  dropped: list[str] = []
  pytest_line = None
  set_e = False
  for loc, cmd, sub in _expand(script, "", helpers or {}):
    if cmd.startswith("#!"):
      continue
    argv = _argv(cmd)
    if argv[:1] == ["set"] and any(re.match(r"^-\w*e", a) for a in argv[1:]):
      set_e = True
    extras = _pytest_extras(argv)
    if extras is not None:
      if pytest_line is not None:
        raise TaskFormatError(file, loc, f"a second pytest run (first: {pytest_line})")
      pytest_line = loc
      pip += [e for e in extras if not TOOLING.match(_name(e))]
      dropped.append(f"{loc}: {cmd.splitlines()[0][:120]}")
      continue
    pk = _packages(argv)
    if pk is not None:
      kind, names = pk
      if kind == "apt":
        apt += names
      else:
        pip += [n for n in names if not TOOLING.match(_name(n))]
      dropped.append(f"{loc}: {cmd.splitlines()[0][:120]}")
      continue
    if _boilerplate(cmd, argv, pytest_line is not None):
      dropped.append(f"{loc}: {cmd.splitlines()[0][:120]}")
      continue
    if _NETWORK.search(cmd):
      raise TaskFormatError(
        file,
        loc,
        f"needs the network at test time, which the sandbox does not have: {cmd.splitlines()[0][:160]}",
      )
    (post if pytest_line is not None else pre).append(f"(\n{cmd}\n)" if sub else cmd)
  uniq = lambda xs: tuple(dict.fromkeys(xs))  # noqa: E731
  if pytest_line is None:
    return TestScript(
      False,
      shell="\n".join(pre) + "\n",
      pip_packages=uniq(pip),
      apt_packages=uniq(apt),
      set_e=set_e,
      dropped=tuple(dropped),
    )
  return TestScript(
    True,
    pre="\n".join(pre) + ("\n" if pre else ""),
    post="\n".join(post) + ("\n" if post else ""),
    pip_packages=uniq(pip),
    apt_packages=uniq(apt),
    set_e=set_e,
    dropped=tuple(dropped),
  )
