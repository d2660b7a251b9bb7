"""Shared machinery of the backends: the init script, spec checks, owner tags (to reap the
orphans of dead owners), the live registry with teardown on exit, SIGINT and SIGTERM, and
output caps. Reading a host child's pipes is in pipes.py, file operations in fileops.py."""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref

from envs.sandbox.base import MODES, NETWORKS, ExecResult, Sandbox, SandboxError, TransferLimitError

LIFETIME_GRACE_S = 60.0  # a sandbox outlives its episode by this much (grading, snapshots)
HOME_MB = 64  # $HOME is a tmpfs of this size
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What uid 0 keeps in container mode, on both backends (Docker's default set without NET_RAW,
# MKNOD, AUDIT_WRITE: no network and no devices anyway); within its own user namespace on bwrap.
CONTAINER_CAPS = (
  "chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
  "net_bind_service", "sys_chroot", "setfcap",
)  # fmt: skip

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


_PKG_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?")


def host_network(spec) -> bool:
  """Whether the sandbox shares the host's network (network=True); "packages" does not."""
  return spec.network is True


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
    (
      "user",
      spec.user is None or (bool(spec.user) and ":" not in spec.user),
      "must be None or a user name of the image",
    ),
    ("mode", spec.mode in MODES, f"must be one of {MODES}"),
    (
      "network",
      isinstance(spec.network, bool) or spec.network in NETWORKS,
      f"must be one of {NETWORKS}",
    ),
    (
      "apt_packages",
      all(_PKG_RE.fullmatch(p) for p in spec.apt_packages),
      "want Debian package names",
    ),
    (
      "pip_packages",
      all(p and p.strip() == p and not p.startswith("-") for p in spec.pip_packages),
      "want pip requirement specifiers (no options)",
    ),
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


def user_name(spec) -> str:
  """The user execs run as: spec.user, else the mode's default."""
  return spec.user or ("root" if spec.mode == "container" else "agent")


def sandbox_env(spec, home: str, tag: str, egress=None) -> dict[str, str]:
  """The environment of every exec: fixed basics, the exec's kill tag, the package proxy's
  settings (`egress`: an EgressProxy), then spec.env."""
  user = user_name(spec)
  env = {"PATH": PATH, "HOME": home, "USER": user, "LOGNAME": user}
  env.update(SHELL="/bin/bash", LANG="C.UTF-8", TERM="dumb", AGENTRL_EXEC=tag)
  env.update(egress.env() if egress is not None else {})
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


# Kills every process the caller may signal but itself and pid 1 (kill(-1) skips both), until
# only they are left: no process names or /proc fields are parsed.
KILL_ALL = (
  "for i in $(seq 50); do kill -9 -1 2>/dev/null || exit 0; "
  "set -- /proc/[0-9]*; [ $# -le 3 ] && exit 0; done; exit 0"
)


def mount_dir() -> pathlib.Path:
  """Host folder where overlay roots are attached for a moment (traversable by sandbox uids)."""
  p = runtime_root() / "mnt"
  p.mkdir(mode=0o711, exist_ok=True)
  runtime_root().chmod(0o711)
  return p


def reap_stale_state() -> int:
  n = 0
  if (mnt := runtime_root() / "mnt").is_dir():  # a root left attached by a killed owner
    for d in mnt.iterdir():
      if not owner_alive(d.name.split("-", 1)[0]):
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
        with contextlib.suppress(OSError):
          d.rmdir()
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
  """Keeps the first `cap` bytes of a stream (in memory, or written to `sink`, a binary file);
  counts (and drops) the rest."""

  def __init__(self, cap: int | None, sink=None):
    self.cap, self.buf, self.dropped, self.sink, self.n = cap, bytearray(), 0, sink, 0

  def add(self, data: bytes) -> None:
    room = len(data) if self.cap is None else max(0, self.cap - self.n)
    keep = data[:room]
    if self.sink is not None:
      self.sink.write(keep)
    else:
      self.buf += keep
    self.n += len(keep)
    self.dropped += len(data) - len(keep)


def check_transfer(out: Capped, cap: int | None, what) -> None:
  """TransferLimitError when a capped transfer overflowed."""
  if out.dropped:
    raise TransferLimitError(f"{what!r}: more than {cap} bytes (the host-side cap)")


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
