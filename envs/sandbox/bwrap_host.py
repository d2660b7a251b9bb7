"""Host-side helpers of the bubblewrap backend: bwrap's arguments, rlimit fallbacks, a
long-lived spawner thread, process killing, /dev without devpts, and the setup-script runner
for image layers."""

from __future__ import annotations

import logging
import os
import pathlib
import queue
import select
import signal
import subprocess
import threading
import time

from envs.sandbox import cgroups, common
from envs.sandbox.base import SandboxError, SandboxSpec


def bwrap_args(
  s: SandboxSpec, root: str, home: str, userns: list[str] | None, ro_binds: tuple[str, ...] = ()
) -> list[str]:
  """bwrap's options for a sandbox of `s` on `root`; `userns`: our own namespace's options
  (host root), None: bwrap makes an unprivileged one; `ro_binds`: host folders bound
  read-only at the same path (local package sources)."""
  mb = 1 << 20
  a = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
  a += [] if common.host_network(s) else ["--unshare-net"]
  if userns is not None:  # our own namespace (uid 0..65535 mapped); bwrap's pid 1 runs as uid 0
    a += userns
  else:  # any other uid (or --disable-userns) nests a second user namespace, and nsenter,
    # unprivileged, could not reach the namespaces owned by the outer one: keep our own uid
    a += ["--unshare-user", "--uid", str(os.getuid()), "--gid", str(os.getgid())]
  bind = "--bind" if s.mode == "container" else "--ro-bind"
  a += ["--die-with-parent", "--new-session", "--as-pid-1", bind, root, "/"]
  a += ["--proc", "/proc"] + (["--dev", "/dev"] if userns is not None else plain_dev())
  mounts = {"/dev/shm": (s.disk_mb * mb, "1777")}
  if s.mode == "readonly":
    mounts.update({home: (common.HOME_MB * mb, "0755"), "/tmp": (s.disk_mb * mb, "1777")})
    mounts[s.workdir] = (s.disk_mb * mb, "0755")
  for path, (size, perms) in sorted(mounts.items(), key=lambda m: m[0].count("/")):
    a += ["--size", str(size), "--perms", perms, "--tmpfs", path]
  for path in ro_binds:  # after the tmpfs mounts, which would hide them
    if s.mode == "readonly" and not os.path.isdir(root + path):  # no mount point: unbound
      logging.warning("package source %s: no folder in the read-only image to bind it on", path)
      continue
    a += ["--ro-bind", path, path]
  a += ["--hostname", "sandbox", "--chdir", s.workdir, "--clearenv"]
  return a + ["--setenv", "PATH", common.PATH]


def prlimit_prefix(limits_via: set[str], pids: int, memory_bytes: int, root: bool) -> list[str]:
  """`prlimit` fallbacks for limits no cgroup enforces (RLIMIT_AS is per process)."""
  out = []
  if "pids" not in limits_via:
    # As root every exec's processes count against the sandbox's own uid; else against ours
    # (the monitor, pid 1 and its sleep included).
    out.append(("--nproc", pids + (0 if root else count_procs(os.getuid()))))
  if "memory" not in limits_via:
    out.append(("--as", memory_bytes))
  return ["prlimit", *[f"{flag}={v}:{v}" for flag, v in out], "--"] if out else []


class _Spawner:
  """Starts bwrap from one long-lived thread: --die-with-parent (PR_SET_PDEATHSIG) fires when
  the *thread* that forked bwrap exits, so sandboxes made in short-lived threads would die."""

  def __init__(self):
    self._q: queue.Queue = queue.Queue()
    threading.Thread(target=self._loop, name="agentrl-bwrap-spawner", daemon=True).start()

  def _loop(self):
    while True:
      args, kw, box = self._q.get()
      try:
        box.put((subprocess.Popen(args, **kw), None))
      except BaseException as e:  # noqa: BLE001 (handed back to the caller)
        box.put((None, e))

  def popen(self, args, **kw) -> subprocess.Popen:
    box: queue.Queue = queue.Queue(maxsize=1)
    self._q.put((args, kw, box))
    proc, err = box.get()
    if err is not None:
      raise err
    return proc


_SPAWNER: _Spawner | None = None
_SPAWNER_LOCK = threading.Lock()
_REAPED = False


def popen_long_lived(args, **kw) -> subprocess.Popen:
  """Popen from a thread that lives as long as the process (the main one, or the spawner)."""
  global _SPAWNER, _REAPED
  with _SPAWNER_LOCK:
    if not _REAPED:  # once per process: orphans of dead owners
      _REAPED = True
      common.reap_stale_state()
      cgroups.reap_stale(cgroups.detect(), common.owner_alive)
    if threading.current_thread() is threading.main_thread():
      return subprocess.Popen(args, **kw)
    if _SPAWNER is None:
      _SPAWNER = _Spawner()
  return _SPAWNER.popen(args, **kw)


def readable(fd, timeout_s: float) -> bool:
  """Whether `fd` (an int or a file) is readable within `timeout_s`.

  poll, not select: select() raises ValueError for descriptors past 1024, which a run with
  many concurrent sandboxes reaches.
  """
  poller = select.poll()
  poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
  return bool(poller.poll(max(0.0, timeout_s) * 1000.0))


def read_until(fd: int, stop: bytes, timeout_s: float) -> bytes:
  data, end = b"", time.monotonic() + timeout_s
  while stop not in data:
    left = end - time.monotonic()
    if left <= 0 or not readable(fd, left):
      raise TimeoutError
    chunk = os.read(fd, 4096)
    if not chunk:
      break
    data += chunk
  return data


def plain_dev() -> list[str]:
  """/dev without devpts: unprivileged, `--dev` nests a second user namespace (see above)."""
  a = ["--tmpfs", "/dev"]
  for d in ("null", "zero", "full", "random", "urandom", "tty"):
    a += ["--dev-bind", f"/dev/{d}", f"/dev/{d}"]
  for i, name in enumerate(("stdin", "stdout", "stderr")):
    a += ["--symlink", f"/proc/self/fd/{i}", f"/dev/{name}"]
  return a + ["--symlink", "/proc/self/fd", "/dev/fd", "--dir", "/dev/shm"]


def kill_quietly(pid: int) -> None:
  try:
    os.kill(pid, signal.SIGKILL)
  except ProcessLookupError:
    pass


def end_tree(pid1: int | None, pidfd: int | None, proc: subprocess.Popen | None) -> None:
  """Ends a sandbox's bwrap tree: pid 1 first (`pidfd` its pidfd), then bwrap (`proc`).

  pid 1 first, so that bwrap (its parent) reaps it: killed first, bwrap would leave it to the
  host's init, and until that reaps it (seconds on some hosts) its pids slot stays taken in
  the cgroups a restore starts the new pid 1 in. pid 1's pidfd turns readable when it exits,
  before bwrap has reaped it; bwrap exits by itself once it has, so wait for that (10 s) rather
  than kill bwrap in between. pid 1 gone <=> every process of its pid namespace gone.
  The pidfd is closed here.
  """
  if pid1 is not None:
    kill_quietly(pid1)
    readable(pidfd, 30)
    os.close(pidfd)
  if proc is not None:
    try:
      proc.wait(timeout=10 if pid1 is not None else 0)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait(timeout=30)


def count_procs(uid: int) -> int:
  n = 0
  for d in pathlib.Path("/proc").iterdir():
    try:
      n += d.name.isdigit() and d.stat().st_uid == uid
    except OSError:
      pass
  return n


def kill_tagged(pid1: int, tag: str, spare: int = 0) -> None:
  """SIGKILLs every process in pid1's pid namespace whose environment carries `tag`."""
  try:
    ns = os.readlink(f"/proc/{pid1}/ns/pid")
  except OSError:
    return
  needle = f"AGENTRL_EXEC={tag}\0".encode()
  for _ in range(3):  # a process may fork while we walk /proc
    for d in pathlib.Path("/proc").iterdir():
      if not d.name.isdigit() or int(d.name) == spare:
        continue
      try:
        if os.readlink(d / "ns/pid") == ns and needle in (d / "environ").read_bytes():
          kill_quietly(int(d.name))
      except OSError:
        pass


def run_setup_script(tree: pathlib.Path, script: str) -> None:
  """Runs a task's setup script as root in `tree` (writable, no network): an image layer."""
  a = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0", "--die-with-parent"]
  a += ["--bind", str(tree), "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
  if os.geteuid() == 0:
    a += ["--cap-add", "ALL"]
  a += ["--chdir", "/", "--clearenv", "--setenv", "PATH", common.PATH, "--setenv", "HOME", "/root"]
  p = subprocess.run([*a, "/bin/bash", "-ec", script], capture_output=True, text=True, timeout=1800)
  if p.returncode != 0:
    raise SandboxError(f"setup script failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
