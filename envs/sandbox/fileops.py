"""Sandbox file operations, done with tar/cat/sh in the sandbox's filesystem (both backends).

A backend's `_run` runs them where no sandbox process can see, signal or ptrace them, and never
runs a program the agent could have written outside the sandbox (bubblewrap: its own static
helper outside the pid namespace, helper_ops.py; Docker: in the container as a uid the agent
does not have, or the daemon's archive API), never as host root on a path the sandbox
controls. Everything leaving a sandbox goes through a host-side pipe with a byte cap (TransferLimitError past it) and is unpacked on the host with
tarfile's "data" filter, without link members or symlinks that are absolute or leave the
destination. Snapshots are tar files on the host, capped in size; `restore()` accepts only ids
the same sandbox issued.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tarfile
import tempfile

from envs.sandbox.base import SandboxError, TransferLimitError
from envs.sandbox.common import HOME_MB, runtime_root, unique_name

_WRITE = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"'
_READ = '[ -e "$1" ] || exit 3; [ -d "$1" ] && exit 4; exec cat -- "$1"'
# Archives hold a folder's *contents*, never the folder itself: its own mode/owner differ per
# backend (/tmp is root-owned under Docker) and tar would fail to restore them.
_UNTAR = 'mkdir -p -- "$1" && exec tar -C "$1" -xpf - --same-owner --numeric-owner'
_SNAPSHOT = (
  'cd / && find "$@" -mindepth 1 -maxdepth 1 -print0 | '
  "tar -cf - --format=posix --sparse --numeric-owner --null -T -"
)
_HOST_TAR = "find . -mindepth 1 -maxdepth 1 -print0 | tar -cf - --null -T - --owner=0 --group=0"
_TAR_OUT = 'cd -- "$(dirname -- "$1")" && exec tar -cf - --sparse -- "$(basename -- "$1")"'
_RESTORE = (  # chmod only when something was not deletable (a folder made read-only)
  'for d; do find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + 2>/dev/null || '
  '{ chmod -R u+rwX -- "$d"; find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + ; }; done; '
  "exec tar -C / -xpf - --same-owner --numeric-owner"
)


def _untrusted_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
  """For archives made in a sandbox: tarfile's "data" filter (nothing outside `dest`, no
  device, fifo or setuid bit), no hard links, no absolute or escaping symlinks (dropped)."""
  if member.islnk() or member.isdev():
    return None
  try:
    return tarfile.data_filter(member, dest)
  except tarfile.FilterError:
    if member.issym():
      return None  # an absolute or escaping link is not materialised on the host
    raise


class TarFileOps:
  """write_file/read_file/upload/download/snapshot/restore over a backend's `_run`.

  `_run(argv, stdin, stdout, timeout_s) -> (rc, stdout_bytes, stderr_bytes)` runs argv as
  the sandbox user in the workdir; stdin is bytes, a binary file or None; stdout a binary
  file (then stdout_bytes is empty) or None. It raises SandboxError on infrastructure failure.
  """

  spec: object
  home: str
  _snap_dir: pathlib.Path | None = None
  _snap_seq = 0

  def _abs(self, path: str) -> str:
    p = path if path.startswith("/") else os.path.join(self.spec.workdir, path)
    return os.path.normpath(p)

  def writable_roots(self) -> list[str]:
    roots = sorted({os.path.normpath(p) for p in (self.spec.workdir, "/tmp", self.home)})
    return [r for r in roots if not any(r != o and r.startswith(o + "/") for o in roots)]

  def _io_timeout(self) -> float:
    return max(120.0, self.spec.exec_timeout_s)

  def transfer_cap(self) -> int:
    """Bytes any one transfer or snapshot may carry out of the sandbox (and, for downloads,
    the total size unpacked on the host): everything its tmpfs mounts can hold, plus slack."""
    return (3 * self.spec.disk_mb + HOME_MB + 16) << 20

  def _user_ids(self) -> tuple[int, int]:
    return self.uid, self.gid

  def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
    if isinstance(data, str):
      data = data.encode()
    self._write_stream(self._abs(path), data, mode)

  def _write_stream(self, path: str, data, mode: int) -> None:
    uid, gid = self._user_ids()
    argv = ["/bin/sh", "-c", _WRITE + ' && chown -h "$3" -- "$1"', "sh", path]
    argv += [f"{mode & 0o7777:o}", f"{uid}:{gid}"]
    rc, _, err = self._run(argv, data)
    if rc != 0:
      raise OSError(f"write_file {path}: {err.decode(errors='replace').strip()} (exit {rc})")

  def read_file(self, path: str) -> bytes:
    path = self._abs(path)
    rc, out, err = self._run(["/bin/sh", "-c", _READ, "sh", path], cap=self.transfer_cap())
    if rc == 3:
      raise FileNotFoundError(path)
    if rc == 4:
      raise IsADirectoryError(path)
    if rc != 0:
      raise OSError(f"read_file {path}: {err.decode(errors='replace').strip()} (exit {rc})")
    return out

  def upload(self, host_path: str, sandbox_path: str) -> None:
    """Copies a host file to `sandbox_path`, or a host folder's contents into that folder."""
    dst = self._abs(sandbox_path)
    src = pathlib.Path(host_path)
    if src.is_file():
      with open(src, "rb") as f:
        return self._write_stream(dst, f, src.stat().st_mode)
    if not src.is_dir():
      raise FileNotFoundError(host_path)
    uid, gid = self._user_ids()  # the archive names the sandbox user as owner of everything
    own = _HOST_TAR.replace("--owner=0 --group=0", f"--owner={uid} --group={gid} --numeric-owner")
    tar = subprocess.Popen(["/bin/sh", "-c", own], cwd=src, stdout=subprocess.PIPE)
    try:
      rc, _, err = self._run(["/bin/sh", "-c", _UNTAR, "sh", dst], tar.stdout)
    finally:
      tar.stdout.close()
      tar.wait()
    if rc != 0 or tar.returncode != 0:
      raise OSError(f"upload {host_path} -> {dst}: {err.decode(errors='replace').strip()}")

  def download(self, sandbox_path: str, host_path: str) -> None:
    """Copies a sandbox file or folder to `host_path` (a folder merges into an existing one)."""
    src = self._abs(sandbox_path)
    dest = pathlib.Path(host_path).absolute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    cap = self.transfer_cap()
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".agentrl-dl-") as tmp:
      with open(os.path.join(tmp, "x.tar"), "w+b") as f:
        self._tar_out(src, f, cap)
        f.seek(0)
        _extract_capped(f, os.path.join(tmp, "x"), cap, src)
      got = pathlib.Path(tmp, "x", os.path.basename(src) or ".")
      if got.is_symlink() or not (got.is_dir() or got.is_file()):
        raise FileNotFoundError(f"download {src}: not a regular file or folder")
      if got.is_dir() and dest.is_dir():
        shutil.copytree(got, dest, symlinks=True, dirs_exist_ok=True)
      else:
        os.replace(got, dest)

  def _tar_out(self, src: str, f, cap: int) -> None:
    """Writes a tar of `src` (named by its basename) to the host file `f`, at most `cap` bytes."""
    rc, _, err = self._run(["/bin/sh", "-c", _TAR_OUT, "sh", src], None, f, cap=cap)
    if rc != 0:
      raise FileNotFoundError(f"download {src}: {err.decode(errors='replace').strip()}")

  def snapshot(self) -> str:
    if self._snap_dir is None:
      self._snap_dir = pathlib.Path(
        tempfile.mkdtemp(prefix=unique_name() + "-", dir=runtime_root())
      )
      self._issued: set[str] = set()
    self._snap_seq += 1
    path = self._snap_dir / f"snap-{self._snap_seq}.tar"
    try:
      with open(path, "wb") as f:
        self._snapshot_to(f, self.transfer_cap())
    except BaseException:
      path.unlink(missing_ok=True)
      raise
    self._issued.add(str(path))
    return str(path)

  def _snapshot_to(self, f, cap: int) -> None:
    """Writes the archive of every writable root to `f` (at most `cap` bytes)."""
    rel = [r.lstrip("/") for r in self.writable_roots()]
    argv = ["/bin/sh", "-c", _SNAPSHOT, "sh", *rel]
    rc, _, err = self._run(argv, None, f, self._io_timeout(), cap=cap)
    if rc not in (0, 1):  # 1: a file changed while being read (a background writer)
      raise SandboxError(f"snapshot failed (exit {rc}): {err.decode(errors='replace')[-2000:]}")

  def restore(self, snapshot_id: str) -> None:
    if snapshot_id not in getattr(self, "_issued", ()):
      raise KeyError(f"unknown snapshot {snapshot_id!r}: not issued by this sandbox (or closed)")
    self._restore_from(snapshot_id)

  def _restore_from(self, path: str) -> None:
    with open(path, "rb") as f:
      argv = ["/bin/sh", "-c", _RESTORE, "sh", *self.writable_roots()]
      rc, _, err = self._run(argv, f, None, self._io_timeout())
    if rc != 0:
      raise SandboxError(f"restore failed (exit {rc}): {err.decode(errors='replace')[-2000:]}")

  def _drop_snapshots(self) -> None:
    if self._snap_dir is not None:
      shutil.rmtree(self._snap_dir, ignore_errors=True)
      self._issued = set()


def _extract_capped(f, dest: str, cap: int, what: str) -> None:
  """Unpacks an untrusted archive; TransferLimitError if its members' sizes (sparse files at
  their full length) add up to more than `cap` bytes. A hard link becomes a copy of its
  target's data (no link member is made on the host)."""
  with tarfile.open(fileobj=f) as tf:
    members, links, total = [], [], 0
    for m in tf:
      total += m.size
      if total > cap:
        raise TransferLimitError(f"download {what}: more than {cap} bytes unpacked (host cap)")
      (links if m.islnk() else members).append(m)
    tf.extractall(dest, members=members, filter=_untrusted_filter)
    for m in links:
      try:
        target = tf.getmember(m.linkname)
      except KeyError:
        continue
      if not target.isreg():
        continue
      total += target.size
      if total > cap:
        raise TransferLimitError(f"download {what}: more than {cap} bytes unpacked (host cap)")
      copy = target.replace(name=m.name, deep=False)
      if (ok := _untrusted_filter(copy, dest)) is not None:
        tf.extract(ok, dest, filter="fully_trusted")  # checked by the filter just above
