"""Docker's container-mode file operations and process cleanup, done from outside the container.

In container mode the agent is uid 0 with CAP_KILL, so nothing run *inside* the container is
out of its reach. Transfers therefore use the daemon's archive API (`put_archive`,
`get_archive`: the daemon reads and writes the container's filesystem itself), every byte
coming out is capped host-side, and archives are unpacked on the host only through
fileops' filter. Snapshots are committed images (capped by the writable layer's size);
restore recreates the container from one. Stray processes are found by the daemon (pids of
the container's cgroup) and killed from the host; pid 1's own session (its helpers) is spared.
"""

from __future__ import annotations

import io
import os
import pathlib
import signal
import tarfile
import tempfile
import time

from envs.sandbox import common, services
from envs.sandbox.base import SandboxError, TransferLimitError

SNAP_REPO = "agentrl-snap"


def boot_ticks() -> int:
  """Now, in the clock ticks of /proc/PID/stat's start time (one tick early: a margin)."""
  return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK")) - 1


def _stat_fields(pid: int) -> list[bytes] | None:
  """The fields after the process name (split at its *last* ')': a name may hold anything)."""
  try:
    raw = pathlib.Path(f"/proc/{pid}/stat").read_bytes()
  except OSError:
    return None
  return raw.rsplit(b")", 1)[1].split()


def _await_reaped(killed: dict[int, bytes], wait_s: float = 10.0) -> None:
  """Waits until the SIGKILLed processes are gone: a killed process holds its slot in the pids
  cgroup until pid 1 reaps it, and an exec that comes sooner finds the table still full."""
  deadline = time.monotonic() + wait_s
  while killed and time.monotonic() < deadline:
    killed = {p: t for p, t in killed.items() if (f := _stat_fields(p)) and f[19] == t}
    if killed:
      time.sleep(0.02)


class ArchiveFileOps:
  """Overrides TarFileOps' transport in container mode (readonly mode keeps TarFileOps')."""

  def _container_mode(self) -> bool:
    return self.spec.mode == "container"

  # --- transport --------------------------------------------------------------------------

  def _tar_out(self, src: str, f, cap: int) -> None:
    if not self._container_mode():
      return super()._tar_out(src, f, cap)
    import docker.errors  # noqa: PLC0415

    try:
      stream, _ = self.api.get_archive(self.id, src)
      n = 0
      for chunk in stream:
        n += len(chunk)
        if n > cap:
          raise TransferLimitError(f"{src}: more than {cap} bytes (the host-side cap)")
        f.write(chunk)
    except docker.errors.NotFound as e:
      raise FileNotFoundError(f"{src}: not in the sandbox") from e
    except docker.errors.APIError as e:
      raise OSError(f"{src}: {e}") from e

  def _put_tar(self, data: bytes) -> None:
    import docker.errors  # noqa: PLC0415

    try:
      if not self.api.put_archive(self.id, "/", data):
        raise OSError("the daemon refused the archive")
    except docker.errors.APIError as e:
      raise OSError(f"upload into the sandbox: {e}") from e

  def _member(self, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.uid, ti.gid, ti.mtime = (
      kind,
      mode & 0o7777,
      self.uid,
      self.gid,
      time.time(),
    )
    return ti

  def _write_stream(self, path: str, data, mode: int) -> None:
    if not self._container_mode():
      return super()._write_stream(path, data, mode)
    blob = data if isinstance(data, bytes | bytearray) else data.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
      ti = self._member(path.lstrip("/"), tarfile.REGTYPE, mode)
      ti.size = len(blob)
      tf.addfile(ti, io.BytesIO(blob))
    self._put_tar(buf.getvalue())

  def read_file(self, path: str) -> bytes:
    if not self._container_mode():
      return super().read_file(path)
    path = self._abs(path)
    cap = self.transfer_cap()
    with tempfile.TemporaryFile() as f:
      self._tar_out(path, f, cap)
      f.seek(0)
      with tarfile.open(fileobj=f) as tf:
        first = tf.next()
        if first is None:
          raise FileNotFoundError(path)
        if first.isdir():
          raise IsADirectoryError(path)
        if not first.isfile():
          raise OSError(f"read_file {path}: not a regular file")
        return tf.extractfile(first).read()

  def upload(self, host_path: str, sandbox_path: str) -> None:
    if not self._container_mode() or not os.path.isdir(host_path):
      return super().upload(host_path, sandbox_path)
    dst = self._abs(sandbox_path).lstrip("/")

    def owned(ti: tarfile.TarInfo) -> tarfile.TarInfo:
      ti.uid, ti.gid, ti.uname, ti.gname = self.uid, self.gid, "", ""
      return ti

    with tempfile.TemporaryFile() as f:
      with tarfile.open(fileobj=f, mode="w") as tf:
        tf.addfile(self._member(dst, tarfile.DIRTYPE, 0o755))  # the folder, if missing
        for child in sorted(os.listdir(host_path)):
          tf.add(os.path.join(host_path, child), arcname=f"{dst}/{child}", filter=owned)
      f.seek(0)
      self._put_tar(f.read())

  # --- snapshots: committed images ----------------------------------------------------------

  def snapshot(self) -> str:
    if not self._container_mode():
      return super().snapshot()
    cap = self.transfer_cap()
    rows = self.api.containers(all=True, filters={"id": self.id}, size=True)
    size = (rows[0].get("SizeRw") or 0) if rows else 0
    if size > cap:
      raise TransferLimitError(f"snapshot: the writable layer holds {size} bytes, over {cap}")
    self._snap_seq += 1
    tag = f"{self.name.replace('.', '-')}-{self._snap_seq}"
    img = self.api.commit(self.id, repository=SNAP_REPO, tag=tag)["Id"]
    if not hasattr(self, "_issued"):
      self._issued = set()
    sid = f"docker-image:{img}"
    self._issued.add(sid)
    self._images = [*getattr(self, "_images", []), f"{SNAP_REPO}:{tag}"]
    return sid

  def _restore_from(self, snapshot_id: str) -> None:
    if not self._container_mode():
      return super()._restore_from(snapshot_id)
    self._recreate(snapshot_id.split(":", 1)[1])

  def _drop_images(self) -> None:
    for tag in getattr(self, "_images", []):
      try:
        self.api.remove_image(tag, force=True)
      except Exception:  # noqa: BLE001, S110 (gone already, or in use by a restored box)
        pass
    self._images = []

  # --- processes ----------------------------------------------------------------------------

  def _kill_since(self, since: int, keep: frozenset[int] = frozenset()) -> bool:
    """SIGKILLs, from the host, every container process started at or after `since` (boot
    ticks) but pid 1's session and the host pids `keep`; False when the daemon's pids are not
    this host's."""
    try:
      pid1 = int(self.api.inspect_container(self.id)["State"]["Pid"])
    except Exception:  # noqa: BLE001 (gone: nothing to kill)
      return True
    init = _stat_fields(pid1) if pid1 > 0 else None
    if init is None:
      return False
    # Frozen (docker pause: the cgroup freezer), no process can fork while we look, so one
    # pass catches a fork storm; the SIGKILLs land when the container thaws.
    frozen, killed = self._freeze(True), {}
    try:
      for _ in range(1 if frozen else 5):
        try:
          procs = self.api.top(self.id, ps_args="-o pid")["Processes"] or []
        except Exception:  # noqa: BLE001
          return True
        victims = []
        for row in procs:
          pid = int(row[0])
          f = _stat_fields(pid)
          if pid == pid1 or pid in keep or f is None or f[3] == init[3] or int(f[19]) < since:
            continue
          victims.append(pid)
          killed[pid] = f[19]
        for pid in victims:
          try:
            os.kill(pid, signal.SIGKILL)
          except ProcessLookupError:
            pass
        if not victims:
          break
    finally:
      if frozen:
        self._freeze(False)
    _await_reaped(killed)
    return True

  def _freeze(self, on: bool) -> bool:
    """docker pause / unpause; False where the daemon cannot (no freezer)."""
    try:
      (self.api.pause if on else self.api.unpause)(self.id)
      return True
    except Exception as e:  # noqa: BLE001
      if on:  # a pause the daemon reported failed may still have taken (seen under load)
        return self._paused() is True
      # A thaw whose container is not paused (the daemon answered 500 "is not paused" under
      # load) has reached what it was for; a container still paused is an error.
      if self._paused() is False:
        return True
      # Seen in CI under load: the daemon's record says paused while runc's container runs
      # (500 "cannot resume a running process"), and every exec is refused as "paused". A
      # pause (runc can freeze what runs) then a thaw brings the two back in step.
      if "cannot resume a running process" in str(e):
        try:
          self.api.pause(self.id)
          self.api.unpause(self.id)
        except Exception:  # noqa: BLE001 - the original error says more
          raise e from None
        return self._paused() is False
      raise

  def _paused(self) -> bool | None:
    """Whether the daemon reports the container paused (None: it cannot say)."""
    try:
      return bool(self.api.inspect_container(self.id)["State"]["Paused"])
    except Exception:  # noqa: BLE001
      return None

  def host_init_pid(self) -> int | None:
    """pid 1's host pid, when the daemon's pids are this host's (its stat file is readable)."""
    self._check_open()
    try:
      pid1 = int(self.api.inspect_container(self.id)["State"]["Pid"])
    except Exception:  # noqa: BLE001 (gone: nothing to keep)
      return None
    return pid1 if pid1 > 0 and _stat_fields(pid1) is not None else None

  def kill_strays(self, keep: tuple = ()) -> None:
    self._check_open()
    if self._kill_since(0, frozenset(s.host_pid for s in keep)):
      return
    script = ["/bin/bash", "-c", services.kill_script(keep)] if keep else None
    rc, _, err = self._run(script or ["/bin/sh", "-c", common.KILL_ALL])
    if rc != 0:
      raise SandboxError(f"could not kill the sandbox's processes: {err[-500:]!r}")
