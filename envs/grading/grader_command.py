"""Builds what the grader runs in the sandbox: the test files, the pytest runner, the command.

The command kills the agent's processes, checks every uploaded file against its sha256, runs
the tests under `env -i` with absolute tool paths and a timeout, kills strays again, and
prints the report between nonce-tagged marks on the exec's stdout (read on the host; scoring
is envs.grading.scoring). pytest runs isolated from the agent's environment: `python -I` (no PYTHON*
variables, no user site, no script or working folder on sys.path), the workspace *appended*
to sys.path (the standard library and pytest come first, so a workspace `json.py` or
`sqlite3/` cannot shadow them), `-B -X pycache_prefix=` a folder
under /proc (no bytecode read or written from interpreter start on: a `__pycache__/*.pyc` the
agent planted, in the workspace or the stdlib, is never read), our own ini file
and `--confcutdir`. The JUnit report leaves the test process through fd 3 (the exec's
stdout) before the process ends with `os._exit`, so no atexit hook of the agent's code runs;
ahead of it on fd 3, a witness plugin registered before any test module is imported writes
one line per test call (raised or not), against which the host checks the report.
"""

from __future__ import annotations

import hashlib
import re
import shlex

from envs.grading.workspace import NO_PYCACHE
from envs.sandbox import services
from envs.sandbox.services import Service
from envs.task import FileEntry, Task
from envs.task_env import KILL_STRAYS

GRADER_ROOT = "/tmp/.agentrl-grader"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RC_MARK = "@@AGENTRL_RC="
REPORT_BEGIN, REPORT_END = "@@AGENTRL_REPORT_BEGIN@@", "@@AGENTRL_REPORT_END@@"
TESTS_CHANGED = "@@AGENTRL_TESTS_CHANGED@@"
OUTPUT_BEGIN, OUTPUT_END = "@@AGENTRL_OUTPUT_BEGIN@@", "@@AGENTRL_OUTPUT_END@@"
OUTPUT_BYTES = 4096  # the tail of the test runner's output kept with the result
WITNESS = "@@W "  # a witness line: "@@W <base64 node id> call|func ok|raised"
# Runs pytest; the report goes to fd 3 (the exec's stdout) and the process ends with os._exit.
# The witness plugin is registered before any test module (or agent code) is imported: as the
# innermost wrapper of each test's call it writes, at once, whether the call raised; the host
# checks the JUnit report against these lines (envs.grading.reports.witness_conflicts).
_BOOT_PY = r"""
import base64, os, sys
sys.path.append(os.environ["AGENTRL_WORKSPACE"])
import pytest


def _witness(tag, write=os.write, b64=base64.b64encode):
  # Everything it uses is bound here: swapping a global of __main__ later changes nothing.
  def record(nodeid, phase, out):
    state = "ok" if out.excinfo is None else "raised"
    write(3, b"%s%s %s %s\n" % (tag, b64(nodeid.encode()), phase, state.encode()))

  class Witness:
    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_call(self, item):
      record(item.nodeid, b"call", (yield))

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_pyfunc_call(self, pyfuncitem):
      record(pyfuncitem.nodeid, b"func", (yield))

  return Witness(), write


_plugin, _write = _witness(WITNESS)
del _witness
rc = pytest.main(sys.argv[1:], plugins=[_plugin])
try:
  with open(os.environ["AGENTRL_JUNIT"], "rb") as f:
    data = memoryview(f.read())
except OSError:
  data = memoryview(b"")
while data:
  data = data[_write(3, data):]
os.close(3)
sys.stdout.flush(); sys.stderr.flush()
os._exit(int(rc))
""".replace("WITNESS", repr(WITNESS.encode()))


def prepare_command(gdir: str, nonce: str, manifest: str, keep: tuple[Service, ...] = ()) -> str:
  """Kills strays (but `keep`), makes the grader's folders (prints `ready-<nonce>`), then the
  manifest."""
  return (
    f"{services.kill_script(keep)}\n/bin/rm -rf {GRADER_ROOT}-* 2>/dev/null; umask 077; "
    f"/bin/mkdir {gdir} && /bin/mkdir {gdir}/tests {gdir}/logs {gdir}/home "
    f"&& echo ready-{nonce}; {manifest}"
  )


def rewrite_paths(text: str, tdir: str, ldir: str) -> str:
  """Terminal-Bench's fixed /tests and /logs paths, moved under the grader's folder."""
  text = re.sub(r"(?<![\w./-])/logs/verifier\b", ldir, text)
  text = re.sub(r"(?<![\w./-])/logs\b(?!/agent)", ldir, text)
  return re.sub(r"(?<![\w./-])/tests\b", tdir, text)


def hidden_test_files(task: Task, tdir: str, ldir: str) -> tuple[FileEntry, ...]:
  if not task.tests.rewrite_paths:
    return task.tests.files
  out = []
  for f in task.tests.files:
    try:
      text = f.data.decode()
    except UnicodeDecodeError:
      out.append(f)
      continue
    out.append(FileEntry(f.path, rewrite_paths(text, tdir, ldir).encode(), f.mode))
  return tuple(out)


def runner_files(task: Task, gdir: str) -> tuple[FileEntry, ...]:
  """The pytest runner: ini file, boot script and run.sh (pre steps, pytest, post steps)."""
  if task.tests.runner != "pytest":
    return ()
  tdir, ldir = f"{gdir}/tests", f"{gdir}/logs"
  pre, post = task.tests.pre_script, task.tests.post_script
  if task.tests.rewrite_paths:
    pre, post = rewrite_paths(pre, tdir, ldir), rewrite_paths(post, tdir, ldir)
  pytest = (
    f"/usr/bin/python3 -I -B -X {NO_PYCACHE} {gdir}/boot.py -c {gdir}/pytest.ini --rootdir={tdir} "
    f"--confcutdir={tdir} -p no:cacheprovider -p no:doctest -p no:nose -p no:pastebin "
    f"-p no:stepwise -o junit_suite_name=$AGENTRL_NONCE --junitxml={ldir}/junit.xml -q -rA {tdir}"
  )
  run = (
    f"cd {shlex.quote(task.workdir)} || exit 90\n{pre}\n{pytest}\n__rc=$?\n"
    f"cd {shlex.quote(task.workdir)} || exit 90\n"
    f'[ "$__rc" = 0 ] || exit "$__rc"\n( {post}\n:\n) || exit 86\nexit 0\n'
    if post.strip()
    else f"cd {shlex.quote(task.workdir)} || exit 90\n{pre}\n{pytest}\n"
  )
  return (
    FileEntry("pytest.ini", b"[pytest]\n"),
    FileEntry("boot.py", _BOOT_PY.encode()),
    FileEntry("run.sh", run.encode(), 0o755),
  )


def _test_env(task: Task, gdir: str, nonce: str, package_env: dict[str, str]) -> str:
  tdir, ldir = f"{gdir}/tests", f"{gdir}/logs"
  env = {
    "PATH": SYSTEM_PATH,
    "HOME": f"{gdir}/home",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TEST_DIR": tdir,
    "LOGS_DIR": ldir,
    "AGENTRL_WORKSPACE": task.workdir,
    "AGENTRL_JUNIT": f"{ldir}/junit.xml",
    "AGENTRL_NONCE": nonce,
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    **package_env,
    **dict(task.env),
    **dict(task.tests.env),
  }
  if task.tests.rewrite_paths:  # an image's `ENV TEST_DIR=/tests` names the grader's copy
    env = {k: rewrite_paths(v, tdir, ldir) for k, v in env.items()}
  return " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())


def grade_command(
  task: Task,
  gdir: str,
  nonce: str,
  timeout: float,
  files: tuple[FileEntry, ...],
  keep: tuple[Service, ...] = (),
  package_env: dict[str, str] | None = None,
) -> str:
  """The one shell command that checks the uploaded files, runs the tests, prints the report.

  `keep`: the agent's services, alive while the tests run (the files are checked again after
  the run, when everything is dead). `package_env`: the sandbox's package-egress settings
  (proxy, pip index), which the tests' clean environment would otherwise lose.
  """
  tdir, ldir = f"{gdir}/tests", f"{gdir}/logs"
  sums = "".join(f"{hashlib.sha256(f.data).hexdigest()}  {gdir}/{f.path}\n" for f in files)
  verify = "/usr/bin/sha256sum --quiet --strict -c - >/dev/null 2>&1 <<'__AGENTRL_SUMS__' || "
  check = f'{verify}{{ echo "{TESTS_CHANGED}{nonce}"; exit 0; }}\n{sums}__AGENTRL_SUMS__\n'
  # A kept service runs beside the tests: one that rewrote them and did not put them back
  # is caught here (a rewrite undone before this point is not: docs/security.md).
  recheck = f'{verify}echo "{TESTS_CHANGED}{nonce}"\n{sums}__AGENTRL_SUMS__\n' if keep else ""
  if task.tests.runner == "shell":
    run = f"/bin/bash {tdir}/test.sh > {ldir}/test-output.txt 2>&1"
    # The reward files are read right here, after the strays are killed, not by a later call.
    tail = (
      f'echo "{REPORT_BEGIN}{nonce}"; for __f in reward.json reward.txt; do /usr/bin/head -c '
      f"65536 {ldir}/$__f 2>/dev/null | /usr/bin/base64 -w0; echo; done; "
      f'echo "{REPORT_END}{nonce}"\n'
    )
    head = ""
  else:
    run = f"/bin/bash {gdir}/run.sh 3>&1 > {ldir}/test-output.txt 2>&1"
    head, tail = f'echo "{REPORT_BEGIN}{nonce}"\n', f'echo; echo "{REPORT_END}{nonce}"\n'
  # Absolute paths: a task's own PATH (e.g. /app/bin first) must not pick the grader's tools.
  # Strays are killed again after the tests so nothing they started rewrites the report.
  # The runner's own output (base64: whatever the tests print cannot fake a mark) for the result.
  output = (
    f'echo "{OUTPUT_BEGIN}{nonce}"; /usr/bin/tail -c {OUTPUT_BYTES} {ldir}/test-output.txt '
    f'2>/dev/null | /usr/bin/base64 -w0; echo; echo "{OUTPUT_END}{nonce}"\n'
  )
  env = _test_env(task, gdir, nonce, package_env or {})
  return (
    f"{services.kill_script(keep)}\n{check}cd {shlex.quote(task.workdir)} || exit 90\n{head}"
    f"/usr/bin/env -i {env} /usr/bin/timeout -k 5 {int(timeout)} "
    f"{run}\n__rc=$?\n{KILL_STRAYS}\n{recheck}{tail}{output}"
    f'echo "{RC_MARK}${{__rc}}@@{nonce}"'
  )
