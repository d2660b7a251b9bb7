"""The bubblewrap backend: namespaces, an overlay root (writable or read-only), cgroup limits.

One sandbox is one `bwrap` process tree. Its pid 1 is a small shell loop (`common.INIT_SCRIPT`): it reaps
orphans, ignores every signal (pid 1 of a pid namespace cannot be SIGKILLed from inside, so
nothing the agent does can end the sandbox early) and exits at the end of the sandbox's life.
Each exec enters the sandbox's user/mount/pid/net/ipc/uts namespaces with `nsenter`, after a
tiny `sh` wrapper has put itself into the sandbox's cgroups (so a fork bomb cannot fork outside
them before it is accounted). As host root (the normal case) every sandbox gets its own user
namespace over a leased block of 65536 unprivileged host uids and an overlay root (userns.py):
in "container" mode the agent is uid 0 inside, writes anywhere (into a size-capped tmpfs upper
layer) and keeps Docker's default capabilities minus the dangerous ones, within its namespace;
in "readonly" mode the root is bound read-only and the workdir, /tmp and $HOME are tmpfs.
Every exec runs under a seccomp filter with no-new-privileges (seccomp.py). File transfers
are done by a static host helper that joins only the user and mount namespaces (never the pid
namespace: no sandbox process can see, signal or ptrace it) and executes nothing, so no
program the agent could have written ever runs outside the sandbox (fileop_helper.py);
snapshots of container mode are the upper layer, read host-side (overlay.py).
Without root, bubblewrap runs as the caller (read-only mode only). Nothing is left on the host
after close(): the mounts live in the sandbox's mount namespace.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import threading
import time

from envs.sandbox import (
  bwrap_host,
  cgroups,
  common,
  egress,
  fileop_helper,
  helper_ops,
  layers,
  overlay,
  pipes,
  seccomp,
  services,
  system_guard,
  userns,
)
from envs.sandbox import image as image_lib
from envs.sandbox.base import ExecResult, Sandbox, SandboxError, SandboxExhaustedError, SandboxSpec
from envs.sandbox.bwrap_host import run_setup_script

# Exec wrapper: join each cgroup given before `--`, then exec the rest.
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


class BwrapSandbox(helper_ops.HelperFileOps, Sandbox):
  """A bubblewrap sandbox. `cgroup_mode` overrides AGENTRL_CGROUP (auto|v1|v2|none)."""

  def __init__(self, spec: SandboxSpec, cgroup_mode: str | None = None):
    common.check_spec(spec)
    with common.creating():
      self._create(spec, cgroup_mode)

  def _create(self, spec: SandboxSpec, cgroup_mode: str | None) -> None:
    self.spec, self._closed, self._lock = spec, False, threading.RLock()
    self.name = common.unique_name()
    self._root = os.geteuid() == 0
    if not self._root and spec.mode == "container":
      raise SandboxError(
        "SandboxSpec.mode='container' on bwrap needs root on the host (user namespaces with "
        "a uid range and an idmapped overlay); use mode='readonly' or the docker backend"
      )
    img = layers.resolve_spec_image(spec, run_setup_script)
    self.image = img
    self.user = common.user_name(spec)
    self.uid, self.gid, self.home = img.user(self.user)
    rootfs = image_lib.ensure_rootfs(img, (spec.workdir, self.home))
    self._range = self._userns = self._upper = self._xfds = None
    self._cg, self._proc, self._oom_seen, self._broken = None, None, 0, False
    self.egress = egress.for_spec(spec, self.name)  # network="packages": the package proxy
    support = cgroups.detect(cgroup_mode)
    self.limits_via = set(support.limits)
    self._t0 = time.monotonic()
    self._end = self._t0 + spec.episode_timeout_s
    try:
      if self._root:
        self._range = userns.RangeLease()
        self._userns = userns.new_userns(self._range.base)
        self._xfds = seccomp.ExecFds()
        self.host_uid = self._range.base + self.uid
      else:
        self.host_uid = os.getuid()
      if support.mode != "none":
        mem, cpus = spec.memory_mb << 20, spec.cpus
        self._cg = cgroups.SandboxCgroup(support, self.name, mem, spec.pids, cpus)
      self._rootfs = rootfs
      self._start(rootfs)
      common.register(self)
      seed = rootfs / spec.workdir.lstrip("/")
      if spec.mode == "readonly" and self._root:  # bwrap mounted the tmpfs as uid 0
        self._io(["chown", str(self.uid), str(self.gid), spec.workdir, self.home])
      if spec.mode == "readonly" and any(seed.iterdir()):  # the image's workdir files
        self.upload(str(seed), spec.workdir)
    except BaseException:
      self.close()
      raise

  # --- start-up ---------------------------------------------------------------------------

  def _mount_root(self, rootfs: pathlib.Path) -> str:
    """Host root: attaches the overlay at a private host folder until bwrap has taken it."""
    if not self._root:
      return str(rootfs)
    if self._upper is None:
      self._upper = userns.new_upper(self.spec.disk_mb << 20, self._range.base)
    return overlay.mount_root(rootfs, self._userns, self._upper, self._range.base, self.name)

  def _start(self, rootfs: pathlib.Path) -> None:
    r_info, w_info = os.pipe()
    r_blk, w_blk = os.pipe()
    fds = [w_info, r_blk]
    self._seccomp_fd = -1
    target = None
    try:
      root = self._mount_root(rootfs)
      target = root if self._root else None
      if self._root:
        self._seccomp_fd = os.open(seccomp.filter_path(), os.O_RDONLY)
        fds += [self._userns, self._seccomp_fd]
      extra = ["--userns", str(self._userns), "--seccomp", str(self._seccomp_fd)]
      binds = self.egress.sources.folders() if self.egress else ()
      args = bwrap_host.bwrap_args(self.spec, root, self.home, extra if self._root else None, binds)
      args += ["--info-fd", str(w_info), "--block-fd", str(r_blk)]
    except BaseException:
      for fd in (r_info, w_info, r_blk, w_blk):
        os.close(fd)
      if target:
        overlay.release_root(target)
      raise
    life = self.spec.episode_timeout_s + common.LIFETIME_GRACE_S
    args += ["--", "/bin/sh", "-c", common.INIT_SCRIPT, *common.init_args(True, life)]
    if self._root:  # setpriv, not Popen(user=...): that disables vfork, and fork is slow
      u = str(self._range.base)  # the namespace's owner (bwrap joins it with --userns)
      args = ["setpriv", f"--reuid={u}", f"--regid={u}", "--clear-groups", "--", *args]
    args = self._prlimit_prefix() + args  # set on itself: another process' would need a cap
    kw = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    kw.update(pass_fds=tuple(fds), start_new_session=True, env={"PATH": common.PATH})
    try:
      self._proc = bwrap_host.popen_long_lived(args, **kw)
      for fd in (w_info, r_blk):
        os.close(fd)
      w_info = r_blk = -1
      info = json.loads(bwrap_host.read_until(r_info, b"}", 30.0))
      self.pid1 = int(info["child-pid"])
      self._pidfd = os.pidfd_open(self.pid1)
      self._confine(self.pid1)
      os.write(w_blk, b"x")
      if bwrap_host.read_until(self._proc.stdout.fileno(), b"x", 30.0) != b"x":
        raise TimeoutError
      if self.egress is not None:  # its network namespace is up now (pid 1 runs)
        self.egress.attach(self.pid1, userns=not self._root)
    except (TimeoutError, ValueError, KeyError, OSError) as e:
      err = b""
      if self._proc is not None:
        self._proc.kill()
        if hasattr(self, "pid1"):  # blocked before its PR_SET_PDEATHSIG: kill it ourselves
          bwrap_host.kill_quietly(self.pid1)
        if bwrap_host.readable(self._proc.stderr, 5.0):
          err = os.read(self._proc.stderr.fileno(), 1 << 16)
      raise SandboxError(f"bwrap failed to start: {err.decode(errors='replace')} {e!r}") from e
    finally:
      for fd in (r_info, w_info, r_blk, w_blk, self._seccomp_fd):
        if fd >= 0:
          os.close(fd)
      if target:  # the sandbox holds its own copy of the mount now
        overlay.release_root(target)
      if self._proc is not None:  # pid 1 ignores SIGPIPE; nothing else writes there
        self._proc.stdout.close()
        self._proc.stderr.close()

  def _confine(self, pid: int) -> None:
    """Puts the (still blocked) pid 1 into the cgroups; protects it from the OOM killer."""
    if self._cg is not None:
      for f in self._cg.procs_files("init"):
        with open(f, "w") as fh:
          fh.write(str(pid))
    try:  # needs CAP_SYS_RESOURCE; without it the OOM killer may pick pid 1 (then: SandboxError)
      pathlib.Path(f"/proc/{pid}/oom_score_adj").write_text("-1000")
    except OSError:
      pass

  def _prlimit_prefix(self) -> list[str]:
    s = self.spec
    return bwrap_host.prlimit_prefix(self.limits_via, s.pids, s.memory_mb << 20, self._root)

  # --- exec ---------------------------------------------------------------------------------

  def _enter_argv(self, leaf: str) -> list[str]:
    pre = []
    if self._cg is not None:
      pre = ["/bin/sh", "-c", _JOIN, "sh", *self._cg.procs_files(leaf), "--"]
    pre += self._prlimit_prefix()
    ns = ["-U", "-m", "-i", "-u", "-p"] + ([] if common.host_network(self.spec) else ["-n"])
    enter = [*pre, "nsenter", "-t", str(self.pid1), *ns, "-r", "-w"]
    if not self._root:
      return [*enter, "--preserve-credentials", "--"]
    keep = common.CONTAINER_CAPS if self.spec.mode == "container" else ()
    cred = ["-S", str(self.uid), "-G", str(self.gid)]
    post = self._xfds.argv(keep)  # after nsenter's setns, which resets the bounding set
    return [*enter, *cred, "--", *post]

  def _check_open(self) -> None:
    if self._closed:
      raise SandboxError(f"sandbox {self.name} is closed")
    if self._dead():
      self._broken = True
      why = f"sandbox {self.name} died (bwrap exit {self._proc.returncode})"
      if self._cg is not None and (self._cg.oom_kills() or 0) > 0:
        raise SandboxExhaustedError(f"{why} after an OOM kill in its cgroup")
      raise SandboxError(why)

  def _spawn_inside(self, argv, stdin, stdout, tag: str):
    self._check_open()
    leaf = self._cg.new_leaf() if self._cg is not None else ""
    p = subprocess.Popen(
      self._enter_argv(leaf or "init") + argv,
      stdin=stdin,
      stdout=stdout,
      stderr=subprocess.PIPE,
      env=common.sandbox_env(self.spec, self.home, tag, self.egress),
      start_new_session=True,
      pass_fds=(self._xfds.wrapper, self._xfds.filter) if self._xfds else (),
    )
    return p, leaf

  def _finish(self, p: subprocess.Popen, leaf: str, tag: str, deadline: float, timed_out: bool):
    if not timed_out:
      try:
        p.wait(timeout=max(0.0, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        timed_out = True
    if timed_out:
      self._kill_exec(p, leaf, tag)
    rc = common.normalize_rc(p.wait())
    for f in (p.stdout, p.stderr):
      if f is not None:
        f.close()
    if self._cg is not None and leaf:
      self._cg.drop_leaf(leaf)
    return rc, timed_out

  def _kill_exec(self, p: subprocess.Popen, leaf: str, tag: str) -> None:
    """Kills the exec's whole tree: its cgroup leaf, its process group, and (without a
    tracking cgroup) every sandbox process that inherited its AGENTRL_EXEC tag."""
    if self._cg is None or not leaf or not self._cg.kill(leaf, spare=p.pid):
      bwrap_host.kill_tagged(self.pid1, tag, spare=p.pid)
    try:  # nsenter exits once its child is dead; if not, the whole group goes
      p.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
      try:
        os.killpg(p.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass

  def exec(self, cmd: str, timeout_s: float | None = None, stdin: str | None = None) -> ExecResult:
    t0 = time.monotonic()
    timeout = self.spec.exec_timeout_s if timeout_s is None else timeout_s
    if self._end - t0 <= 0:
      self._check_open()
      return ExecResult(137, "", "episode time limit reached", timed_out=True)
    deadline = t0 + min(timeout, self._end - t0)
    tag = f"{self.name}-{time.monotonic_ns()}"
    data = stdin.encode() if isinstance(stdin, str) else stdin
    pin = subprocess.PIPE if data is not None else subprocess.DEVNULL
    p, leaf = self._spawn_inside(["/bin/bash", "-lc", cmd], pin, subprocess.PIPE, tag)
    out, err = common.Capped(self.spec.max_output_bytes), common.Capped(self.spec.max_output_bytes)
    sinks = {p.stdout.fileno(): out, p.stderr.fileno(): err}
    hit = pipes.pump(p, sinks, data, deadline)
    rc, timed_out = self._finish(p, leaf, tag, deadline, hit)
    self._check_open()
    if rc == 125 and err.buf.startswith(b"sh: "):
      self._broken = True
      raise SandboxError(f"could not join the sandbox cgroups: {err.buf[:500]!r}")
    if rc == 1 and err.buf.startswith(b"nsenter: ") and b"\n" not in err.buf[:-1]:
      self._broken = True
      raise SandboxError(f"could not enter the sandbox: {err.buf[:500]!r}")
    oom = False
    if self._cg is not None and (n := self._cg.oom_kills()) is not None:
      oom, self._oom_seen = n > self._oom_seen, max(n, self._oom_seen)
    return common.make_result(rc, out, err, timed_out, t0, oom)

  def _run(self, argv, stdin=None, stdout=None, timeout_s: float | None = None, cap=None):
    """Runs the file helper's operation `argv` (see HelperFileOps) as the sandbox's root in its
    user and mount namespaces only: stdout goes through a host-side pipe, capped at `cap`."""
    self._check_open()
    deadline = time.monotonic() + (timeout_s or self._io_timeout())
    data = stdin if isinstance(stdin, bytes | bytearray) else None
    pin = subprocess.PIPE if data is not None else (stdin or subprocess.DEVNULL)
    keep = "0" if self._root else "1"  # unprivileged: bwrap's namespace maps only our uid
    p = subprocess.Popen(
      [fileop_helper.helper_path(), str(self.pid1), keep, *argv],
      stdin=pin,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      env={"PATH": common.PATH, "HOME": "/root", "LANG": "C.UTF-8"},
      start_new_session=True,
    )
    out, err = common.Capped(cap, sink=stdout), common.Capped(1 << 20)
    sinks = {p.stdout.fileno(): out, p.stderr.fileno(): err}
    try:
      hit = pipes.pump(p, sinks, bytes(data) if data is not None else None, deadline, stop=out)
      if not hit and not out.dropped:
        try:  # the output ended: the process is about to exit
          p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
          hit = True
    finally:
      if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
      rc = common.normalize_rc(p.wait())
      p.stdout.close()
      p.stderr.close()
    if rc != 0 and not os.path.exists(f"/proc/{self.pid1}/ns/mnt"):  # pid 1 exited (or is
      bwrap_host.readable(self._pidfd, 5)  # exiting): wait for it, then say the sandbox died
    self._check_open()
    common.check_transfer(out, cap, argv)
    if hit:
      raise SandboxError(f"file operation {argv[:3]} timed out")
    return rc, bytes(out.buf), bytes(err.buf)

  def _io(self, argv) -> None:
    rc, _, err = self._run(argv)
    if rc != 0:
      raise SandboxError(f"{argv[0]} failed in the sandbox: {err.decode(errors='replace')}")

  # --- snapshots (container mode: the upper layer, read and written host-side) -------------

  def _snapshot_to(self, f, cap: int) -> None:
    if self.spec.mode != "container" or not self._root:
      return super()._snapshot_to(f, cap)
    overlay.snapshot_upper(self._upper, f, cap, self._io_timeout())

  def _restore_from(self, path: str) -> None:
    if self.spec.mode != "container" or not self._root:
      return super()._restore_from(path)
    size = self.spec.disk_mb << 20
    upper = overlay.restore_upper(path, size, self._range.base, self._io_timeout())
    with self._lock:  # the whole sandbox restarts on the restored layer (namespaces anew)
      self._stop_pid1()
      os.close(self._upper)
      self._upper = upper
      self._start(self._rootfs)

  # --- state ------------------------------------------------------------------------------

  @property
  def alive(self) -> bool:
    return not (self._closed or self._broken or self._proc is None or self._dead())

  def _dead(self) -> bool:
    """pid 1 exited (its pidfd turned readable) or bwrap did."""
    if self._proc.poll() is not None:
      return True
    return bwrap_host.readable(self._pidfd, 0) if hasattr(self, "_pidfd") else False

  def pids_stats(self) -> tuple[int, int] | None:
    """(tasks now, forks refused at the pids limit) when a pids cgroup enforces the limit."""
    return self._cg.pids_stats() if self._cg is not None else None

  def system_fingerprint(self) -> dict[str, str] | None:
    """The upper layer's protected entries (container mode) and, in every mode, the sandbox's
    mount table: a mount made after set-up is a change (one from the agent is refused)."""
    self._check_open()
    out = system_guard.mounts(pathlib.Path(f"/proc/{self.pid1}/mountinfo").read_text())
    if self.spec.mode == "container" and self._root:
      lowers = (str(self._rootfs),)
      out.update(system_guard.fingerprint(f"/proc/self/fd/{self._upper}/u", lowers))
    return out

  def system_layers(self) -> tuple[str, tuple[str, ...]] | None:
    if self.spec.mode != "container" or not self._root:
      return None
    self._check_open()
    return f"/proc/self/fd/{self._upper}/u", (str(self._rootfs),)

  def host_init_pid(self) -> int | None:
    self._check_open()
    return self.pid1

  def kill_strays(self, keep: tuple = ()) -> None:
    self._check_open()
    hosts = frozenset(s.host_pid for s in keep)
    if self._cg is not None and self._cg.kill_leaves(spare="init", keep=hosts):
      return
    # No tracking cgroup: kill(-1) inside the pid namespace (no login shell the agent could
    # have rigged) kills everything the exec's uid may signal but pid 1; with services to
    # keep, the backstop script that spares them does.
    tag = f"{self.name}-kill-{time.monotonic_ns()}"
    argv = (
      ["/bin/bash", "-c", services.kill_script(keep)]
      if keep
      else ["/bin/sh", "-c", common.KILL_ALL]
    )
    p, leaf = self._spawn_inside(argv, subprocess.DEVNULL, subprocess.DEVNULL, tag)
    rc, timed_out = self._finish(p, leaf, tag, time.monotonic() + 30, False)
    if rc != 0 or timed_out:
      raise SandboxError(f"could not kill the sandbox's processes (exit {rc})")

  def _stop_pid1(self) -> None:
    if hasattr(self, "pid1"):
      bwrap_host.end_tree(self.pid1, self._pidfd, self._proc)  # closes the pidfd
      del self.pid1
    else:
      bwrap_host.end_tree(None, None, self._proc)
    if self._cg is not None:  # kills what is left (host-side nsenter of a running exec)
      self._cg.kill()

  def close(self) -> None:
    with self._lock:
      if self._closed:
        return
      self._closed = True
    try:
      self._stop_pid1()
      if self._cg is not None:
        self._cg.destroy()
    finally:
      if self.egress is not None:
        self.egress.close()
      for fd in (self._upper, self._userns):
        if fd is not None:
          os.close(fd)
      self._upper = self._userns = None
      if self._xfds is not None:
        self._xfds.close()
        self._xfds = None
      if self._range is not None:
        self._range.release()
      self._drop_snapshots()
      common.unregister(self)
