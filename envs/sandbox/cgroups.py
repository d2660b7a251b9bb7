"""Per-sandbox cgroups (v1, v2 or hybrid): limits, OOM counts, and killing whole process trees.

A sandbox gets one cgroup `S` per limit controller (memory, pids, cpu) and a *tracking* tree
(v1 freezer or v2) with a leaf per process group we may have to kill: `S/init` and one
`S/e<N>` per exec, so a timeout kills exactly that exec's processes, wherever they
double-forked or setsid'ed to. Cgroups nest under the calling process's own cgroup (in a
sub-folder `agentrl/`), so an outer limit on the caller still covers its sandboxes.

`AGENTRL_CGROUP=auto|v1|v2|none` picks the mechanism (tests use it to cover each path);
without cgroups the backends fall back to rlimits (see bwrap.py).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import pathlib
import signal
import time

LIMIT_CONTROLLERS = ("memory", "pids", "cpu")


@dataclasses.dataclass(frozen=True)
class Support:
  """What this machine offers: parents for v1 limit controllers and the tracking tree."""

  mode: str  # "v1", "v2" or "none"
  v1_parents: tuple[tuple[str, pathlib.Path], ...] = ()  # (controller, parent dir)
  track_parent: pathlib.Path | None = None
  track_kind: str | None = None  # "freezer" or "v2"
  v2_limits: tuple[str, ...] = ()  # controllers usable in the v2 tree

  @property
  def limits(self) -> frozenset[str]:
    return frozenset([c for c, _ in self.v1_parents] + list(self.v2_limits))


def _mounts() -> tuple[dict[str, pathlib.Path], pathlib.Path | None]:
  """v1 controller -> mount point, and the cgroup2 mount point (if any)."""
  v1, v2 = {}, None
  for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
    left, _, right = line.partition(" - ")
    fields, rfields = left.split(), right.split()
    if len(rfields) < 3:
      continue
    mnt, fstype, opts = pathlib.Path(fields[4]), rfields[0], rfields[2].split(",")
    if fstype == "cgroup2" and v2 is None:
      v2 = mnt
    elif fstype == "cgroup":
      for c in opts:
        if c in LIMIT_CONTROLLERS + ("freezer",):
          v1.setdefault(c, mnt)
  return v1, v2


def _own_paths() -> dict[str, str]:
  """Controller (or '' for v2) -> this process's cgroup path."""
  out = {}
  for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines():
    _, ctrls, path = line.split(":", 2)
    for c in ctrls.split(",") if ctrls else [""]:
      out[c] = path
  return out


def _prepare(parent: pathlib.Path) -> pathlib.Path | None:
  try:
    parent.mkdir(exist_ok=True)
    return parent if os.access(parent / "cgroup.procs", os.W_OK) else None
  except OSError:
    return None


def _v2_enable(base: pathlib.Path, parent: pathlib.Path) -> tuple[str, ...]:
  """Enables memory/pids/cpu for children of `base` and `parent`; returns what worked."""
  have = (base / "cgroup.controllers").read_text().split()
  ok = []
  for c in LIMIT_CONTROLLERS:
    if c not in have:
      continue
    try:
      for d in (base, parent):
        if c not in (d / "cgroup.subtree_control").read_text().split():
          (d / "cgroup.subtree_control").write_text(f"+{c}")
      ok.append(c)
    except OSError:  # EBUSY: `base` holds processes (no internal processes in v2)
      pass
  return tuple(ok)


@functools.cache
def detect(mode: str | None = None) -> Support:
  mode = mode or os.environ.get("AGENTRL_CGROUP", "auto")
  if mode == "none" or not pathlib.Path("/proc/self/cgroup").exists():
    return Support("none")
  v1, v2 = _mounts()
  own = _own_paths()
  pure_v2 = v2 is not None and (v2 / "cgroup.controllers").read_text().split() != []
  if mode in ("v2",) or (mode == "auto" and pure_v2 and not v1):
    if v2 is None:
      return Support("none")
    base = v2 / own.get("", "/").lstrip("/")
    parent = _prepare(base / "agentrl")
    if parent is None:
      return Support("none")
    return Support("v2", (), parent, "v2", _v2_enable(base, parent))
  parents = []
  for c in LIMIT_CONTROLLERS:
    if c in v1:
      p = _prepare(v1[c] / own.get(c, "/").lstrip("/") / "agentrl")
      if p is not None:
        parents.append((c, p))
  track, kind = None, None
  if "freezer" in v1:
    track, kind = (
      _prepare(v1["freezer"] / own.get("freezer", "/").lstrip("/") / "agentrl"),
      "freezer",
    )
  if track is None and v2 is not None:
    track, kind = _prepare(v2 / own.get("", "/").lstrip("/") / "agentrl"), "v2"
  if not parents and track is None:
    return Support("none")
  return Support("v1", tuple(parents), track, kind if track else None)


def _write(path: pathlib.Path, value: str) -> None:
  with open(path, "w") as f:
    f.write(value)


def _subdirs(d: pathlib.Path) -> list[pathlib.Path]:
  """`d`'s cgroup folders below it, deepest first."""
  out = []
  try:
    with os.scandir(d) as it:
      for e in it:
        if e.is_dir(follow_symlinks=False):
          out += [*_subdirs(pathlib.Path(e.path)), pathlib.Path(e.path)]
  except FileNotFoundError:
    pass
  return out


def _pids(d: pathlib.Path) -> list[int]:
  out = []
  for sub in [d, *_subdirs(d)]:
    try:
      out += [int(x) for x in (sub / "cgroup.procs").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
      pass
  return out


def _kill_pids(pids: list[int]) -> None:
  for pid in pids:
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass


def _wait(pred, timeout_s: float) -> bool:
  end = time.monotonic() + timeout_s
  delay = 0.0005
  while not pred():
    if time.monotonic() > end:
      return False
    time.sleep(delay)
    delay = min(delay * 2, 0.02)
  return True


def kill_tree(
  d: pathlib.Path,
  kind: str | None,
  timeout_s: float = 10.0,
  spare: int = 0,
  keep: frozenset[int] = frozenset(),
) -> bool:
  """SIGKILLs every process in cgroup `d` and below but `spare` and `keep`; True once none
  other is left.

  `spare` is the host-side nsenter of an exec: killed together with its child, the child
  would be re-parented to the *host's* init (which may not reap); alone, it reaps and exits.
  `keep`: host pids that stay (the services kept through grading, envs.sandbox.services).
  """
  keep = keep | {spare}
  if not d.is_dir() or not [p for p in _pids(d) if p not in keep]:
    return True
  if kind == "v2" and keep == {0} and (d / "cgroup.kill").exists():
    _write(d / "cgroup.kill", "1")
  elif kind in ("freezer", "v2"):
    # Frozen tasks cannot fork, so one pass catches a fork bomb; SIGKILL lands on thaw.
    state, frozen, thawed = (
      ("freezer.state", "FROZEN", "THAWED") if kind == "freezer" else ("cgroup.freeze", "1", "0")
    )
    _write(d / state, frozen)
    if kind == "freezer":
      _wait(lambda: (d / state).read_text().strip() != "FREEZING", 1.0)
    _kill_pids([p for p in _pids(d) if p not in keep])
    _write(d / state, thawed)

  def empty():
    pids = [p for p in _pids(d) if p not in keep]
    _kill_pids(pids)  # also the only mechanism for plain limit cgroups
    return not pids

  return _wait(empty, timeout_s)


def _rmdir_tree(d: pathlib.Path, timeout_s: float = 5.0) -> None:
  if not d.is_dir():
    return
  for p in [*_subdirs(d), d]:

    def gone(p=p):
      try:
        p.rmdir()
        return True
      except FileNotFoundError:
        return True
      except OSError as e:
        if e.errno != errno.EBUSY:
          raise
        return False

    _wait(gone, timeout_s)


class SandboxCgroup:
  """The cgroups of one sandbox. `name` must be unique on the machine."""

  def __init__(self, support: Support, name: str, memory_bytes: int, pids: int, cpus: float):
    self.support = support
    self.dirs: list[tuple[str, pathlib.Path]] = [(c, p / name) for c, p in support.v1_parents]
    self.track = support.track_parent / name if support.track_parent else None
    for _, d in self.dirs:
      d.mkdir()
    if self.track is not None:
      self.track.mkdir()
      (self.track / "init").mkdir()
    for c, d in self.dirs:
      self._limit(c, d, memory_bytes, pids, cpus, v2=False)
    for c in support.v2_limits:
      self._limit(c, self.track, memory_bytes, pids, cpus, v2=True)
    self._n, self._free = 0, []

  @staticmethod
  def _limit(c, d, memory_bytes, pids, cpus, v2):
    if c == "memory" and v2:
      _write(d / "memory.max", str(memory_bytes))
      if (d / "memory.swap.max").exists():
        _write(d / "memory.swap.max", "0")
    elif c == "memory":
      _write(d / "memory.limit_in_bytes", str(memory_bytes))
      if (d / "memory.memsw.limit_in_bytes").exists():
        _write(d / "memory.memsw.limit_in_bytes", str(memory_bytes))
      _write(d / "memory.swappiness", "0")
    elif c == "pids":
      _write(d / "pids.max", str(pids))
    elif c == "cpu" and v2:
      _write(d / "cpu.max", f"{int(cpus * 100_000)} 100000")
    elif c == "cpu":
      _write(d / "cpu.cfs_period_us", "100000")
      _write(d / "cpu.cfs_quota_us", str(int(cpus * 100_000)))

  @property
  def limits(self) -> frozenset[str]:
    return self.support.limits

  def procs_files(self, leaf: str = "init") -> list[str]:
    """The cgroup.procs files a process of `leaf` must be written into, in order."""
    out = [str(d / "cgroup.procs") for _, d in self.dirs]
    if self.track is not None:
      out.append(str(self.track / leaf / "cgroup.procs"))
    return out

  def new_leaf(self) -> str:
    if self._free:
      return self._free.pop()
    self._n += 1
    leaf = f"e{self._n}"
    if self.track is not None:
      (self.track / leaf).mkdir()
    return leaf

  def kill(self, leaf: str | None = None, spare: int = 0) -> bool:
    """Kills `leaf`'s processes (all of the sandbox's when None); True once they are gone."""
    if self.track is not None:
      d = self.track / leaf if leaf else self.track
      return kill_tree(d, self.support.track_kind, spare=spare)
    if leaf is None:
      return all(kill_tree(d, None) for _, d in self.dirs)
    return False  # no tracking tree: the caller falls back to process groups

  def kill_leaves(self, spare: str = "init", keep: frozenset[int] = frozenset()) -> bool:
    """Kills the processes of every exec leaf (not `spare`) but the host pids `keep`; False
    without a tracking tree."""
    if self.track is None:
      return False
    leaves = [d for d in _subdirs(self.track) if d.name != spare]
    ok = all([kill_tree(d, self.support.track_kind, keep=keep) for d in leaves])
    _wait(self._reaped, 10.0)  # the next exec may need the slots (a full process table)
    return ok

  def _pids_dir(self) -> pathlib.Path | None:
    return dict(self.dirs).get("pids") or (self.track if "pids" in self.support.v2_limits else None)

  def _reaped(self) -> bool:
    """No killed task still holds a pids slot: a task leaves cgroup.procs when it dies, but the
    pids limit counts it until its parent (the sandbox's pid 1) reaps it."""
    d = self._pids_dir()
    if d is None:
      return True
    live = 0
    for sub in [d, *_subdirs(d)]:
      for name in ("cgroup.threads", "tasks"):  # v2, v1
        try:
          live += len((sub / name).read_text().split())
          break
        except FileNotFoundError:
          continue
    return int((d / "pids.current").read_text()) <= live

  def drop_leaf(self, leaf: str) -> None:
    """Recycles an exec's leaf once its processes are all gone (background ones keep it)."""
    if self.track is None or not (self.track / leaf / "cgroup.procs").read_text().strip():
      self._free.append(leaf)

  def _read_key(self, d: pathlib.Path, fname: str, key: str) -> int | None:
    try:
      for line in (d / fname).read_text().splitlines():
        k, _, v = line.partition(" ")
        if k == key:
          return int(v)
    except FileNotFoundError:
      return None
    return None

  def oom_kills(self) -> int | None:
    for c, d in self.dirs:
      if c == "memory":
        return self._read_key(d, "memory.oom_control", "oom_kill")
    if "memory" in self.support.v2_limits:
      return self._read_key(self.track, "memory.events", "oom_kill")
    return None

  def pids_stats(self) -> tuple[int, int] | None:
    """(current number of tasks, number of forks refused at the limit), if pids is limited."""
    d = self._pids_dir()
    if d is None:
      return None
    return int((d / "pids.current").read_text()), self._read_key(d, "pids.events", "max") or 0

  def destroy(self) -> None:
    self.kill()
    for _, d in self.dirs:
      _rmdir_tree(d)
    if self.track is not None:
      _rmdir_tree(self.track)


def reap_stale(support: Support, alive) -> int:
  """Kills and removes sandbox cgroups whose owner (name prefix) is no longer `alive`."""
  n = 0
  parents = [p for _, p in support.v1_parents] + (
    [support.track_parent] if support.track_parent else []
  )
  for parent in parents:
    for d in parent.iterdir() if parent.is_dir() else []:
      if d.is_dir() and not alive(d.name.split("-", 1)[0]):
        kind = support.track_kind if parent == support.track_parent else None
        kill_tree(d, kind, timeout_s=2.0)
        _rmdir_tree(d, timeout_s=2.0)
        n += 1
  return n
