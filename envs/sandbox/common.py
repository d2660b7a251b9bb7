"""Shared machinery of the backends: the init script, spec checks, owner tags (to reap the
orphans of dead owners), the live registry with teardown on exit, SIGINT and SIGTERM, and
pumping pipes with an output cap. File operations are in fileops.py."""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import os
import pathlib
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref

from envs.sandbox.base import ExecResult, Sandbox, SandboxError

LIFETIME_GRACE_S = 60.0  # a sandbox outlives its episode by this much (grading, snapshots)
HOME_MB = 64  # $HOME is a tmpfs of this size
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# pid 1 of every sandbox (POSIX sh; dash starts fast): reaps orphans (they are re-parented to
# it and `wait` reaps any child), ignores every signal (pid 1 cannot even be SIGKILLed from
# inside its pid namespace), signals readiness on stdout if $1 is set, and exits at epoch
# second $2 ($3 seconds from now): the sandbox's hard end of life (a safety net should its
# owner die without cleaning up). `date` runs only if the first sleep was killed early; if
# `date` is killed too, it retries, so killing pid 1's helpers never ends the sandbox.
INIT_SCRIPT = (
  "trap '' INT TERM HUP QUIT USR1 USR2 PIPE ALRM TSTP TTIN TTOU; "
  'if [ -n "$1" ]; then printf x; exec >/dev/null; fi; sleep "$3" & wait $!; '
  "while :; do now=$(date +%s); case $now in ''|*[!0-9]*) sleep 1 & wait $!; continue;; esac; "
  '[ "$now" -lt "$2" ] || break; sleep $(($2 - now)) & wait $!; done'
)


def init_args(ready: bool, life_s: float) -> list[str]:
  """argv of INIT_SCRIPT after `sh -c INIT_SCRIPT`."""
  return ["init", "ready" if ready else "", str(int(time.time() + life_s)), str(int(life_s))]


def check_spec(spec) -> None:
  """Raises ValueError naming the SandboxSpec field that cannot work."""
  rules = (
    ("cpus", spec.cpus > 0, "must be > 0"),
    ("memory_mb", spec.memory_mb >= 32, "must be >= 32"),
    ("pids", spec.pids >= 8, "must be >= 8 (the shell and its helpers need a few)"),
    ("disk_mb", spec.disk_mb >= 1, "must be >= 1"),
    ("exec_timeout_s", spec.exec_timeout_s > 0, "must be > 0"),
    ("episode_timeout_s", spec.episode_timeout_s > 0, "must be > 0"),
    ("max_output_bytes", spec.max_output_bytes >= 0, "must be >= 0"),
    ("image", bool(spec.image), "must name an image ('default' or an id)"),
    ("user", bool(spec.user) and ":" not in spec.user, "must be a user name of the image"),
    (
      "workdir",
      spec.workdir.startswith("/") and os.path.normpath(spec.workdir) == spec.workdir != "/",
      "must be a normalized absolute path other than /",
    ),
  )
  for field, ok, why in rules:
    if not ok:
      raise ValueError(f"SandboxSpec.{field}={getattr(spec, field)!r}: {why}")
  for kv in spec.env:
    if len(kv) != 2 or not kv[0] or "=" in kv[0] or "\0" in "".join(kv):
      raise ValueError(f"SandboxSpec.env entry {kv!r}: want (NAME, value) without '=' or NUL")


def sandbox_env(spec, home: str, tag: str) -> dict[str, str]:
  """The environment of every exec: fixed basics, the exec's kill tag, then spec.env."""
  env = {"PATH": PATH, "HOME": home, "USER": spec.user, "LOGNAME": spec.user}
  env.update(SHELL="/bin/bash", LANG="C.UTF-8", TERM="dumb", AGENTRL_EXEC=tag)
  env.update(dict(spec.env))
  return env


# ---------------------------------------------------------------------------------------------
# Owners: a tag that names this process unambiguously (pid + start time), to reap orphans.


def _start_time(pid: int) -> str | None:
  try:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
  except OSError:
    return None
  return stat.rsplit(")", 1)[1].split()[19]


_OWN_TAG: tuple[int, str] | None = None


def owner_tag(pid: int | None = None) -> str:
  global _OWN_TAG
  if pid is None:  # this process (cached per pid: a fork gets its own)
    if _OWN_TAG is None or _OWN_TAG[0] != os.getpid():
      _OWN_TAG = (os.getpid(), f"{os.getpid()}.{_start_time(os.getpid())}")
    return _OWN_TAG[1]
  return f"{pid}.{_start_time(pid)}"


def owner_alive(tag: str) -> bool:
  pid, _, start = tag.partition(".")
  if not pid.isdigit():
    return True  # not ours: leave it alone
  return _start_time(int(pid)) == start


def machine_id() -> str:
  """Host name + boot id: Docker labels are only reaped by processes of the same boot."""
  boot = pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
  return f"{socket.gethostname()}/{boot}"


def runtime_root() -> pathlib.Path:
  """Host folder for per-sandbox state (snapshots); one per user."""
  base = os.environ.get("AGENTRL_RUNTIME") or os.path.join(
    tempfile.gettempdir(), f"agentrl-run-{os.geteuid()}"
  )
  p = pathlib.Path(base)
  p.mkdir(mode=0o700, parents=True, exist_ok=True)
  return p


_SEQ = itertools.count(1)


def unique_name() -> str:
  """`<owner tag>-<n>`: unique on the machine; the owner tag is everything before the first '-'."""
  return f"{owner_tag()}-{next(_SEQ)}"


def reap_stale_state() -> int:
  n = 0
  for d in runtime_root().iterdir():
    if d.is_dir() and not owner_alive(d.name.split("-", 1)[0]):
      shutil.rmtree(d, ignore_errors=True)
      n += 1
  return n


# ---------------------------------------------------------------------------------------------
# Registry of live sandboxes and teardown on exit, SIGINT and SIGTERM.

_LIVE: set[Sandbox] = set()
_LIVE_LOCK = threading.RLock()  # re-entered by the signal handler
_INSTALLED = False
_TEARING_DOWN = False
_CREATING: collections.Counter = collections.Counter()  # thread id -> creations in progress


@contextlib.contextmanager
def creating():
  """Wraps a sandbox's creation, so teardown can wait for creations in other threads."""
  me = threading.get_ident()
  with _LIVE_LOCK:
    if _TEARING_DOWN:
      raise SandboxError("the process is shutting down: no new sandboxes")
    _CREATING[me] += 1
  try:
    yield
  finally:
    with _LIVE_LOCK:
      _CREATING[me] -= 1


def register(sb: Sandbox) -> None:
  """Adds a fully created sandbox; SandboxError (the creator then closes it) at teardown."""
  install_teardown()
  with _LIVE_LOCK:
    if _TEARING_DOWN:
      raise SandboxError("the process is shutting down: no new sandboxes")
    _LIVE.add(sb)


def unregister(sb: Sandbox) -> None:
  with _LIVE_LOCK:
    _LIVE.discard(sb)


def live() -> list[Sandbox]:
  with _LIVE_LOCK:
    return list(_LIVE)


_HOOKS: list = []


def on_teardown(method) -> None:
  """Calls `method` (a bound method, held weakly) before sandboxes are closed at teardown."""
  _HOOKS.append(weakref.WeakMethod(method))


def _others_creating() -> bool:
  me = threading.get_ident()
  with _LIVE_LOCK:
    return any(n > 0 for t, n in _CREATING.items() if t != me)


def close_all(wait_s: float = 30.0) -> None:
  """Teardown: refuses new sandboxes, runs the hooks (pools stop), waits for creations under
  way in other threads (they close themselves), then closes every live sandbox of this
  process in parallel (Docker removal is slow)."""
  global _TEARING_DOWN
  with _LIVE_LOCK:
    _TEARING_DOWN = True
  for ref in list(_HOOKS):
    if (fn := ref()) is not None:
      try:
        fn()
      except Exception:  # noqa: BLE001 (teardown must go on)
        pass
  end = time.monotonic() + wait_s
  while _others_creating() and time.monotonic() < end:
    time.sleep(0.01)
  boxes = live()
  threads = [threading.Thread(target=close_quietly, args=(b,), daemon=True) for b in boxes]
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=60)
  with _LIVE_LOCK:  # a process that survives the signal (a REPL's Ctrl-C) may go on
    _TEARING_DOWN = False


def close_quietly(sb: Sandbox) -> None:
  try:
    sb.close()
  except Exception:  # noqa: BLE001 (teardown must go on for the others)
    pass


def _chain(sig: int, prev):
  def handler(signum, frame):
    close_all()
    if callable(prev):
      prev(signum, frame)
    elif prev == signal.SIG_DFL:
      signal.signal(signum, signal.SIG_DFL)
      os.kill(os.getpid(), signum)

  return handler


def install_teardown() -> None:
  """atexit + SIGINT/SIGTERM handlers that close all sandboxes, then chain to the previous."""
  global _INSTALLED
  if _INSTALLED:
    return
  _INSTALLED = True
  atexit.register(close_all)
  if threading.current_thread() is not threading.main_thread():
    return  # signal handlers can only be set from the main thread; atexit still covers exit
  for sig in (signal.SIGINT, signal.SIGTERM):
    prev = signal.getsignal(sig)
    if prev not in (signal.SIG_IGN, None):
      signal.signal(sig, _chain(sig, prev))


# ---------------------------------------------------------------------------------------------
# Pumping pipes without deadlock, with a per-stream cap.


class Capped:
  """Keeps the first `cap` bytes of a stream; counts (and drops) the rest."""

  def __init__(self, cap: int | None):
    self.cap, self.buf, self.dropped = cap, bytearray(), 0

  def add(self, data: bytes) -> None:
    if self.cap is None:
      self.buf += data
      return
    room = self.cap - len(self.buf)
    if room > 0:
      self.buf += data[:room]
    self.dropped += max(0, len(data) - max(room, 0))


def pump(
  proc: subprocess.Popen,
  sinks: dict[int, Capped],
  stdin: bytes | None,
  deadline: float,
  grace_s: float = 0.1,
) -> bool:
  """Feeds `stdin`, reads the fds in `sinks` until EOF (or `grace_s` after the process exits:
  a background child may hold a pipe open) or `deadline`. True if the deadline was hit."""
  sel = selectors.DefaultSelector()
  for fd in sinks:
    os.set_blocking(fd, False)
    sel.register(fd, selectors.EVENT_READ)
  pidfd = os.pidfd_open(proc.pid)
  sel.register(pidfd, selectors.EVENT_READ)
  view, win = memoryview(stdin or b""), None
  if stdin is not None and proc.stdin is not None:
    win = proc.stdin.fileno()
    os.set_blocking(win, False)
    sel.register(win, selectors.EVENT_WRITE) if view else proc.stdin.close()
  exited_at, readers = None, len(sinks)
  try:
    while readers:
      now = time.monotonic()
      end = deadline if exited_at is None else min(deadline, exited_at + grace_s)
      if now >= end:
        return now >= deadline
      for key, _ in sel.select(end - now):
        fd = key.fd
        if fd == pidfd:
          exited_at = time.monotonic()
          sel.unregister(pidfd)
        elif fd == win:
          try:
            view = view[os.write(win, view[: 1 << 16]) :]
          except BrokenPipeError:
            view = view[:0]
          if not view:
            sel.unregister(win)
            proc.stdin.close()
            win = None
        else:
          data = os.read(fd, 1 << 16)
          if data:
            sinks[fd].add(data)
          else:
            sel.unregister(fd)
            readers -= 1
    return False
  finally:
    os.close(pidfd)
    sel.close()
    if win is not None:
      proc.stdin.close()


def make_result(rc, out: Capped, err: Capped, timed_out, t0, oom=False) -> ExecResult:
  return ExecResult(
    exit_code=rc,
    stdout=out.buf.decode("utf-8", "replace"),
    stderr=err.buf.decode("utf-8", "replace"),
    timed_out=timed_out,
    truncated=bool(out.dropped or err.dropped),
    duration_s=time.monotonic() - t0,
    oom_killed=oom,
  )


def normalize_rc(rc: int) -> int:
  """Popen's -N (killed by signal N) as the shell's 128+N."""
  return 128 - rc if rc < 0 else rc
