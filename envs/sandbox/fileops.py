"""Sandbox file operations, done with tar/cat/sh *inside* the sandbox (both backends).

They run as the sandbox user, never as host root on a path the sandbox controls, so a symlink
planted by the agent cannot reach the host. Archives coming out of a sandbox are unpacked on
the host with a filter (nothing outside the destination, no device files). Snapshots are tar
files on the host (ids are their paths): any sandbox of either backend can restore one while
the sandbox that took it is open.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tarfile
import tempfile

from envs.sandbox.base import SandboxError
from envs.sandbox.common import runtime_root, unique_name

_WRITE = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"'
_READ = '[ -e "$1" ] || exit 3; [ -d "$1" ] && exit 4; exec cat -- "$1"'
# Archives hold a folder's *contents*, never the folder itself: its own mode/owner differ per
# backend (/tmp is root-owned under Docker) and tar would fail to restore them.
_UNTAR = 'mkdir -p -- "$1" && exec tar -C "$1" -xpf - --no-same-owner'
_SNAPSHOT = (
  'cd / && find "$@" -mindepth 1 -maxdepth 1 -print0 | tar -cf - --format=posix --null -T -'
)
_HOST_TAR = "find . -mindepth 1 -maxdepth 1 -print0 | tar -cf - --null -T - --owner=0 --group=0"
_TAR_OUT = 'cd -- "$(dirname -- "$1")" && exec tar -cf - -- "$(basename -- "$1")"'
_RESTORE = (  # chmod only when something was not deletable (a folder made read-only)
  'for d; do find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + 2>/dev/null || '
  '{ chmod -R u+rwX -- "$d"; find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + ; }; done; '
  "exec tar -C / -xpf - --no-same-owner"
)


def _untrusted_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
  """For archives made in a sandbox: nothing outside `dest` (tarfile's "tar" filter), no
  device or fifo; absolute symlinks stay symlinks (a venv's python link is legitimate)."""
  member = tarfile.tar_filter(member, dest)
  return None if member.isdev() else member


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

  def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
    if isinstance(data, str):
      data = data.encode()
    self._write_stream(self._abs(path), data, mode)

  def _write_stream(self, path: str, data, mode: int) -> None:
    rc, _, err = self._run(["/bin/sh", "-c", _WRITE, "sh", path, f"{mode & 0o7777:o}"], data)
    if rc != 0:
      raise OSError(f"write_file {path}: {err.decode(errors='replace').strip()} (exit {rc})")

  def read_file(self, path: str) -> bytes:
    path = self._abs(path)
    rc, out, err = self._run(["/bin/sh", "-c", _READ, "sh", path])
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
    tar = subprocess.Popen(["/bin/sh", "-c", _HOST_TAR], cwd=src, stdout=subprocess.PIPE)
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
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".agentrl-dl-") as tmp:
      with open(os.path.join(tmp, "x.tar"), "w+b") as f:
        rc, _, err = self._run(["/bin/sh", "-c", _TAR_OUT, "sh", src], None, f)
        if rc != 0:
          raise FileNotFoundError(f"download {src}: {err.decode(errors='replace').strip()}")
        f.seek(0)
        with tarfile.open(fileobj=f) as tf:
          tf.extractall(os.path.join(tmp, "x"), filter=_untrusted_filter)
      got = pathlib.Path(tmp, "x", os.path.basename(src) or ".")
      if got.is_dir() and dest.is_dir():
        shutil.copytree(got, dest, symlinks=True, dirs_exist_ok=True)
      else:
        os.replace(got, dest)

  def snapshot(self) -> str:
    if self._snap_dir is None:
      self._snap_dir = pathlib.Path(
        tempfile.mkdtemp(prefix=unique_name() + "-", dir=runtime_root())
      )
    self._snap_seq += 1
    path = self._snap_dir / f"snap-{self._snap_seq}.tar"
    rel = [r.lstrip("/") for r in self.writable_roots()]
    with open(path, "wb") as f:
      argv = ["/bin/sh", "-c", _SNAPSHOT, "sh", *rel]
      rc, _, err = self._run(argv, None, f, self._io_timeout())
    if rc not in (0, 1):  # 1: a file changed while being read (a background writer)
      raise SandboxError(f"snapshot failed (exit {rc}): {err.decode(errors='replace')[-2000:]}")
    return str(path)

  def restore(self, snapshot_id: str) -> None:
    if not os.path.isfile(snapshot_id):
      raise KeyError(f"unknown snapshot {snapshot_id!r} (closed sandbox or wrong id)")
    with open(snapshot_id, "rb") as f:
      argv = ["/bin/sh", "-c", _RESTORE, "sh", *self.writable_roots()]
      rc, _, err = self._run(argv, f, None, self._io_timeout())
    if rc != 0:
      raise SandboxError(f"restore failed (exit {rc}): {err.decode(errors='replace')[-2000:]}")

  def _drop_snapshots(self) -> None:
    if self._snap_dir is not None:
      shutil.rmtree(self._snap_dir, ignore_errors=True)
