"""What the verifier reads: pytest JUnit reports, their witness lines, the tamper scan.

`parse_junit` turns this run's report (checked by its nonce suite name) into test outcomes;
`witness_conflicts` checks it against the witness lines the grader's own plugin wrote while
each test ran (envs.grading.grader_command), so a report rewritten in the test process is caught;
`tamper_flags` compares the workspace manifest after the episode with the one after set-up
(envs.grading.workspace) and flags created or changed files that could subvert the test run.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import pathlib
import re
import xml.etree.ElementTree as ET

from envs.task import Task

# New files with these names change how Python or pytest behave: planted, they are tampering.
_TAMPER_NAMES = ("conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.py", "py.py")
_TAMPER_CONTENT = re.compile(rb"_pytest|pytest_runtest|pytest_collect|junitxml|\.agentrl-grader")


@dataclasses.dataclass(frozen=True)
class TestOutcome:
  name: str  # "<module or class>::<test>"
  outcome: str  # passed | failed | error | skipped
  message: str = ""


# ---------------------------------------------------------------- JUnit XML


def parse_junit(xml_bytes: bytes, nonce: str | None = None) -> list[TestOutcome]:
  """Test outcomes from a pytest JUnit report; ValueError if it is not this run's report."""
  try:
    root = ET.fromstring(xml_bytes)
  except ET.ParseError as e:
    raise ValueError(f"invalid JUnit XML: {e}") from None
  suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
  if not suites:
    raise ValueError("no <testsuite> in the report")
  if nonce is not None and any(s.get("name") != nonce for s in suites):
    raise ValueError("report was not written by this grading run (suite name != nonce)")
  out = []
  for s in suites:
    for case in s.iter("testcase"):
      name = f"{case.get('classname', '')}::{case.get('name', '')}"
      outcome, msg = "passed", ""
      for tag, label in (("skipped", "skipped"), ("failure", "failed"), ("error", "error")):
        el = case.find(tag)
        if el is not None:
          outcome, msg = label, (el.get("message") or el.text or "")[:500]
      out.append(TestOutcome(name, outcome, msg))
  return out


def task_paths(cases: list[TestOutcome], tdir: str, ldir: str) -> list[TestOutcome]:
  """Cases named with the task's own /tests and /logs/verifier paths, not the grader's folder
  (its random name would make a parametrized test's id differ in every trial)."""

  def back(s: str) -> str:
    return s.replace(tdir, "/tests").replace(ldir, "/logs/verifier")

  return [dataclasses.replace(c, name=back(c.name), message=back(c.message)) for c in cases]


def split_witness(report: str, tag: str) -> tuple[dict[str, list[str]], str]:
  """The witness lines at the head of a report ({junit name: ["call ok", ...]}) and the rest.

  The rest must be the JUnit XML: anything else written to the pipe makes the XML invalid."""
  seen: dict[str, list[str]] = {}
  pos = 0  # an offset, not a shrinking copy: the XML after the lines can be megabytes
  while report.startswith(tag, pos):
    end = report.find("\n", pos)
    end = len(report) if end < 0 else end
    line, pos = report[pos:end], end + 1
    parts = line[len(tag) :].split(" ")
    if len(parts) != 3:
      raise ValueError(f"malformed witness line: {line[:200]!r}")
    try:
      nodeid = base64.b64decode(parts[0], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
      raise ValueError(f"malformed witness line: {line[:200]!r}") from None
    seen.setdefault(junit_name(nodeid), []).append(f"{parts[1]} {parts[2]}")
  return seen, report[pos:]


def junit_name(nodeid: str) -> str:
  """A pytest node id as its JUnit case reads (classname::name): `a/test_b.py::C::t[x]` is
  `a.test_b.C::t[x]`, the address rule of pytest's junitxml plugin."""
  path, bracket, params = nodeid.partition("[")
  names = path.split("::")
  names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
  names[-1] += bracket + params
  return ".".join(names[:-1]) + "::" + names[-1]


def witness_conflicts(cases: list[TestOutcome], seen: dict[str, list[str]]) -> list[str]:
  """Tests the report calls passed that the witness saw raise, or never saw called."""
  out = []
  for c in cases:
    if c.outcome != "passed":
      continue
    records = seen.get(c.name, [])
    if not any(r.startswith("call ") for r in records) or any(
      r.endswith(" raised") for r in records
    ):
      out.append(c.name)
  return out


def test_modules(task: Task) -> list[str]:
  mods = []
  for f in task.tests.files:
    p = pathlib.PurePosixPath(f.path)
    if p.suffix == ".py" and (p.name.startswith("test_") or p.stem.endswith("_test")):
      mods.append(p.stem)
  return mods


# ---------------------------------------------------------------- tamper scan


def shadowed_module(path: str) -> str | None:
  """The top-level module a workspace file defines when the workspace is on sys.path."""
  p = pathlib.PurePosixPath(path)
  if len(p.parts) == 1 and p.suffix in (".py", ".pyc") or p.suffix == ".so" and len(p.parts) == 1:
    return p.name.split(".", 1)[0]
  if len(p.parts) == 2 and p.name == "__init__.py":  # a package folder
    return p.parts[0]
  return None


# Python's `site` runs a .pth file's import lines only in these folders; anywhere else a .pth is
# data (a PyTorch model the task asks for), not a path hook.
_SITE_DIRS = frozenset({"site-packages", "dist-packages"})


def tamper_flags(
  baseline: dict[str, str],
  now: dict[str, str],
  contents: dict[str, bytes],
  cwd_on_path: bool = True,
) -> list[str]:
  """Flags for created or changed workspace files that can subvert the test run.

  Stdlib shadowing (a `json.py`, a `sqlite3/` package) is flagged only when it can reach the
  grader's imports: a test script run in the workspace (`cwd_on_path`). The pytest runner
  appends the workspace after the standard library, so there it cannot, and a file the
  reference solution itself creates (a `code.py`) is no tampering.
  """
  import sys

  stdlib = getattr(sys, "stdlib_module_names", frozenset()) | {"pytest", "_pytest", "py"}
  flags = []
  for path, digest in sorted(now.items()):
    if baseline.get(path) == digest:
      continue
    p = pathlib.PurePosixPath(path)
    if (
      p.name in _TAMPER_NAMES
      or p.suffix == ".pth"
      and bool(_SITE_DIRS.intersection(p.parts[:-1]))
      or "_pytest" in p.parts
      or "pytest" in p.parts[:-1]
    ):
      flags.append(f"tamper:planted:{path}")
    elif cwd_on_path and shadowed_module(path) in stdlib:
      flags.append(f"tamper:shadows_stdlib:{path}")
    elif path in contents and _TAMPER_CONTENT.search(contents[path]):
      flags.append(f"tamper:test_machinery_in:{path}")
  return flags


def changed_sources(baseline: dict[str, str], now: dict[str, str]) -> list[str]:
  return [
    p
    for p, d in now.items()
    if baseline.get(p) != d and p.endswith((".py", ".sh", ".pth", ".cfg", ".ini"))
  ]
