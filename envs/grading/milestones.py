"""Milestones and constraints, checked in the sandbox after every agent turn.

A task declares them in task.toml (parsed by envs.task into `Task.milestones` and
`Task.constraints`):

```
[[milestones]]                      # an intermediate goal: shell check, exit 0 = reached
name = "report_written"
check = "test -s out/report.txt && grep -qx 'total: 42' out/report.txt"

[[constraints]]                     # a rule the instruction states, for the whole episode
name = "raw_data_untouched"
kind = "unchanged"                  # these paths keep their initial content (files or folders)
paths = ["raw/"]

[[constraints]]
name = "writes_stay_in_out"
kind = "only_write_under"           # no workspace file outside these is created/changed/deleted
paths = ["out/"]

[[constraints]]
name = "config_mode_kept"
kind = "command"                    # shell check, exit 0 = respected
check = "grep -qx 'mode=production' app.ini"
```

`Monitor.check(turn)` runs every check of a task in ONE sandbox exec (a script that hashes the
workspace and the absolute paths named by `unchanged` constraints when a path constraint
exists, then runs each shell check in a subshell), bounded by one timeout per turn. Turn 0 is the state before the agent acts and
is the baseline for path constraints. `summarize` turns the per-turn records into the episode's
long-horizon facts: which milestones were reached and when, which were lost again, which
constraints were broken and the turn of the first violation. `CheckingSandbox` (one exec = one
turn) calls the monitor after every turn; agents call it through their `on_turn` hook
(envs.agents.episode).

Paths are relative to the workspace unless absolute. Files under `__pycache__` or
`.pytest_cache` are tool by-products and never count as writes for `only_write_under`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import posixpath
import shlex
import uuid

from envs.grading.workspace import manifest_cmd
from envs.sandbox.base import Sandbox, SandboxError
from envs.task import Task

_MARK = "@@AGENTRL_CHECK"
_BYPRODUCT_DIRS = ("__pycache__", ".pytest_cache")
_MAX_CHANGED = 50


@dataclasses.dataclass(frozen=True)
class TurnCheck:
  """The checks after one turn (turn 0: before the agent acted)."""

  turn: int
  milestones: tuple[bool, ...]  # in task.milestones order
  violated: tuple[str, ...]  # names of the constraints broken now
  changed: tuple[str, ...] = ()  # paths created/changed/deleted since turn 0 (capped)
  timed_out: bool = False  # the checks ran out of time (the missing ones count as failed)

  def to_dict(self) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def _norm(path: str, workdir: str) -> str:
  """A constraint path as a manifest key: relative to the workspace, or absolute outside it."""
  p = posixpath.normpath(path)
  wd = posixpath.normpath(workdir)
  if p == wd:
    return "."
  if p.startswith(wd + "/"):
    return p[len(wd) + 1 :]
  return p


def path_matches(path: str, pattern: str) -> bool:
  """`path` is `pattern`, lies under it (a folder), or matches it as a glob."""
  pat = pattern.rstrip("/")
  if pat in (".", ""):
    return True
  return path == pat or path.startswith(pat + "/") or fnmatch.fnmatchcase(path, pattern)


def _is_byproduct(path: str) -> bool:
  return any(part in _BYPRODUCT_DIRS for part in path.split("/"))


def changed_paths(before: dict[str, str], after: dict[str, str]) -> list[str]:
  """Paths created, changed or deleted between two manifests (sorted)."""
  return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def path_violations(task: Task, changed: list[str]) -> list[str]:
  """Names of `unchanged` / `only_write_under` constraints that `changed` breaks."""
  out = []
  for c in task.constraints:
    pats = [_norm(p, task.workdir) for p in c.paths]
    if c.kind == "unchanged":
      if any(path_matches(p, pat) for p in changed for pat in pats):
        out.append(c.name)
    elif c.kind == "only_write_under":
      ws = [p for p in changed if not p.startswith("/") and not _is_byproduct(p)]
      if any(not any(path_matches(p, pat) for pat in pats) for p in ws):
        out.append(c.name)
  return out


def _extra_roots(task: Task) -> list[str]:
  roots = set()
  for c in task.constraints:
    if c.kind == "unchanged":
      roots |= {p for p in (_norm(x, task.workdir) for x in c.paths) if p.startswith("/")}
  return sorted(roots)


def check_script(task: Task, nonce: str) -> str:
  """The one shell script that runs all of a task's checks and prints marked results.

  Each check runs in a subshell (a fork, not two execs as `timeout bash -c` would cost: the
  checks run after every turn, so their cost is most of an episode's overhead). The manifest
  comes first, so a hanging check cannot hide it; the caller's exec timeout bounds the rest.
  """
  lines = [f"cd {shlex.quote(task.workdir)} || exit 90"]
  if needs_manifest(task):
    lines.append(f'printf "{_MARK}:{nonce}:manifest:"')
    lines.append(manifest_cmd(task.workdir, _extra_roots(task)))
  shell_checks = [(f"m{i}", m.check) for i, m in enumerate(task.milestones)]
  shell_checks += [
    (f"c{i}", c.check) for i, c in enumerate(task.constraints) if c.kind == "command"
  ]
  for key, cmd in shell_checks:
    lines.append(f'( {cmd}\n) </dev/null >/dev/null 2>&1; echo "{_MARK}:{nonce}:{key}:$?"')
  return "\n".join(lines) + "\n"


def needs_manifest(task: Task) -> bool:
  return any(c.kind in ("unchanged", "only_write_under") for c in task.constraints)


def parse_check_output(stdout: str, nonce: str) -> tuple[dict[str, int], dict[str, str] | None]:
  """Exit codes by check key, and the manifest (None if the script printed none)."""
  codes, manifest = {}, None
  prefix = f"{_MARK}:{nonce}:"
  for line in stdout.splitlines():
    if not line.startswith(prefix):
      continue
    key, _, rest = line[len(prefix) :].partition(":")
    if key == "manifest":
      try:
        manifest = json.loads(rest)
      except json.JSONDecodeError:
        manifest = None
    else:
      try:
        codes[key] = int(rest)
      except ValueError:
        continue
  return codes, manifest


class Monitor:
  """Runs a task's milestone and constraint checks in a live sandbox, turn after turn."""

  def __init__(self, sandbox: Sandbox, task: Task, check_timeout_s: float = 60.0):
    self.sandbox, self.task, self.check_timeout_s = sandbox, task, check_timeout_s
    self.checks: list[TurnCheck] = []
    self.baseline: dict[str, str] | None = None

  @property
  def active(self) -> bool:
    return bool(self.task.milestones or self.task.constraints)

  def check(self, turn: int) -> TurnCheck | None:
    """Checks the state after `turn`; the first call must be turn 0. None if nothing to check."""
    if not self.active:
      return None
    if self.checks and self.checks[-1].turn == turn:
      return self.checks[-1]
    nonce = uuid.uuid4().hex[:12]
    r = self.sandbox.exec(check_script(self.task, nonce), timeout_s=self.check_timeout_s)
    codes, manifest = parse_check_output(r.stdout, nonce)
    if needs_manifest(self.task) and manifest is None:
      if r.exit_code == 90:  # the workspace itself is gone: everything in it was deleted
        manifest = {}
      else:
        raise SandboxError(f"workspace manifest failed (exit {r.exit_code}): {r.stderr[-500:]}")
    # A check cut off by the timeout has no exit code: it counts as failed (not reached / broken).
    return self._record(turn, codes, manifest, r.timed_out)

  def _record(
    self, turn, codes: dict[str, int], manifest: dict[str, str] | None, timed_out=False
  ) -> TurnCheck:
    task = self.task
    reached = tuple(codes.get(f"m{i}") == 0 for i in range(len(task.milestones)))
    violated = [
      c.name
      for i, c in enumerate(task.constraints)
      if c.kind == "command" and codes.get(f"c{i}") != 0
    ]
    changed: list[str] = []
    if manifest is not None:
      if self.baseline is None:
        self.baseline = manifest
      changed = changed_paths(self.baseline, manifest)
      violated += path_violations(task, changed)
    order = {c.name: i for i, c in enumerate(task.constraints)}
    violated = sorted(set(violated), key=order.__getitem__)
    tc = TurnCheck(turn, reached, tuple(violated), tuple(changed[:_MAX_CHANGED]), timed_out)
    self.checks.append(tc)
    return tc

  def summary(self) -> dict:
    return summarize(self.task, self.checks)


class CheckingSandbox:
  """Delegates to a sandbox; every exec is one agent turn, followed by the monitor's checks."""

  def __init__(self, sb: Sandbox, monitor: Monitor):
    self._sb, self._monitor, self.turns = sb, monitor, 0

  def exec(self, cmd, timeout_s=None, stdin=None):
    r = self._sb.exec(cmd, timeout_s=timeout_s, stdin=stdin)
    self.turns += 1
    self._monitor.check(self.turns)
    return r

  def __getattr__(self, name):
    return getattr(self._sb, name)


def summarize(task: Task, checks: list[TurnCheck]) -> dict:
  """The episode's milestone/constraint facts from its per-turn checks (turn-ordered).

  `first_reached[name]`: first turn whose check saw the milestone hold (None: never);
  `regressed`: milestones reached at some turn but not holding at the end; `first_violation`:
  first turn each constraint was broken; `first_violation_turn`: the earliest of them.
  """
  ms = [m.name for m in task.milestones]
  cs = [c.name for c in task.constraints]
  first_reached: dict[str, int | None] = dict.fromkeys(ms)
  first_violation: dict[str, int | None] = dict.fromkeys(cs)
  for tc in checks:
    for name, ok in zip(ms, tc.milestones, strict=True):
      if ok and first_reached[name] is None:
        first_reached[name] = tc.turn
    for name in tc.violated:
      if first_violation[name] is None:
        first_violation[name] = tc.turn
  last = checks[-1] if checks else None
  final = dict(zip(ms, last.milestones, strict=True)) if last else dict.fromkeys(ms, False)
  reached = [n for n in ms if first_reached[n] is not None]
  turns_v = [t for t in first_violation.values() if t is not None]
  return {
    "milestones": ms,
    "constraints": cs,
    "first_reached": first_reached,
    "final": final,
    "reached": len(reached),
    "total": len(ms),
    "step_success": len(reached) / len(ms) if ms else None,
    "regressed": [n for n in reached if not final[n]],
    "first_violation": first_violation,
    "first_violation_turn": min(turns_v) if turns_v else None,
    "violated_at_end": list(last.violated) if last else [],
    "forgot": bool(turns_v) if cs else None,
    "checked_turns": [tc.turn for tc in checks],
  }
