"""The bubblewrap backend's file operations over its static helper (fileop_helper.py).

The helper executes nothing of the sandbox's, so write_file, read_file, upload, download and
(read-only mode's) snapshot/restore never run a program the agent could have written. Folders
travel as the helper's stream (one header line per entry, its path, its bytes); on the host
the stream becomes a tar file, and downloads are unpacked with fileops' untrusted filter and
caps as before. Container mode's snapshots stay the upper layer, read host-side (overlay.py).
"""

from __future__ import annotations

import os
import re
import stat
import tarfile
import tempfile

from envs.sandbox import fileops
from envs.sandbox.base import SandboxError, TransferLimitError

_HEAD = re.compile(rb"([dfl]) ([0-7]+) (\d+) (\d+) (-?\d+) (\d+) (\d+) (\d+)\n")
_KIND = {b"d": tarfile.DIRTYPE, b"f": tarfile.REGTYPE, b"l": tarfile.SYMTYPE}
_BLOW_UP = 4  # a tar may exceed its stream (512-byte headers): at most this many caps


def _record(f, kind: bytes, mode: int, mtime_ns: int, name: str, size: int, uid: int, gid: int):
  sec, nsec = divmod(mtime_ns, 10**9)
  name_b = os.fsencode(name)
  f.write(b"%s %o %d %d %d %d %d %d\n" % (kind, mode, uid, gid, sec, nsec, size, len(name_b)))
  f.write(name_b)


def _mtime_ns(m: tarfile.TarInfo) -> int:
  """A member's mtime to the nanosecond (its pax header's decimal string; a float loses it)."""
  sec, _, frac = m.pax_headers.get("mtime", str(int(m.mtime))).partition(".")
  return int(sec) * 10**9 + int((frac + "000000000")[:9])


def stream_from_dir(src: str, f, uid: int, gid: int) -> None:
  """The stream of host folder `src`'s contents, every entry owned by uid:gid."""
  for top, dirs, files in os.walk(src):  # never follows links
    for name in sorted(dirs) + sorted(files):
      path = os.path.join(top, name)
      rel = os.path.relpath(path, src)
      st = os.lstat(path)
      mode, ns = stat.S_IMODE(st.st_mode), st.st_mtime_ns
      if stat.S_ISDIR(st.st_mode):
        _record(f, b"d", mode, ns, rel, 0, uid, gid)
      elif stat.S_ISLNK(st.st_mode):
        target = os.fsencode(os.readlink(path))
        _record(f, b"l", mode, ns, rel, len(target), uid, gid)
        f.write(target)
      elif stat.S_ISREG(st.st_mode):
        with open(path, "rb") as g:
          data = g.read()
        _record(f, b"f", mode, ns, rel, len(data), uid, gid)
        f.write(data)


def stream_from_tar(tf: tarfile.TarFile, f) -> None:
  """The stream of a tar this sandbox made (its directories, files and symlinks)."""
  for m in tf:
    kind = b"d" if m.isdir() else b"l" if m.issym() else b"f" if m.isreg() else None
    if kind is None:
      continue
    data = os.fsencode(m.linkname) if m.issym() else b""
    size = m.size if m.isreg() else len(data)
    _record(f, kind, m.mode, _mtime_ns(m), m.name, size, m.uid, m.gid)
    f.write(data) if not m.isreg() else f.write(tf.extractfile(m).read())


def tar_from_stream(stream, out, cap: int, skip=frozenset()) -> None:
  """Writes the helper's `stream` (a file) as a tar to `out`, leaving out the names in `skip`;
  TransferLimitError past _BLOW_UP * cap bytes of tar (many tiny entries)."""
  with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
    while line := stream.readline(200):
      m = _HEAD.fullmatch(line)
      if m is None:
        raise SandboxError(f"file helper: bad stream header {line[:80]!r}")
      kind, mode, uid, gid, sec, nsec, size, n = m.groups()
      name, size = os.fsdecode(stream.read(int(n))), int(size)
      info = tarfile.TarInfo(name)
      info.type, info.mode, info.uid, info.gid = _KIND[kind], int(mode, 8), int(uid), int(gid)
      info.mtime = int(sec) + int(nsec) / 1e9
      info.pax_headers = {"mtime": f"{int(sec)}.{int(nsec):09d}"}  # exact: kept over the float
      if kind == b"l":
        info.linkname = os.fsdecode(stream.read(size))
      elif kind == b"f":
        info.size = size
      if name in skip:
        stream.seek(info.size, os.SEEK_CUR)
        continue
      tf.addfile(info, stream if kind == b"f" else None)
      if out.tell() > _BLOW_UP * cap:
        raise TransferLimitError(f"more than {_BLOW_UP * cap} bytes of tar (the host-side cap)")


class HelperFileOps(fileops.TarFileOps):
  """TarFileOps whose `_run(argv, ...)` runs the helper's operations (argv: OP ARGS...)."""

  def _write_stream(self, path: str, data, mode: int) -> None:
    uid, gid = self._user_ids()
    rc, _, err = self._run(["write", path, f"{mode & 0o7777:o}", str(uid), str(gid)], data)
    if rc != 0:
      raise OSError(f"write_file {path}: {err.decode(errors='replace').strip()} (exit {rc})")

  def read_file(self, path: str) -> bytes:
    path = self._abs(path)
    rc, out, err = self._run(["read", path], cap=self.transfer_cap())
    if rc in (3, 4):
      raise (FileNotFoundError if rc == 3 else IsADirectoryError)(path)
    if rc != 0:
      raise OSError(f"read_file {path}: {err.decode(errors='replace').strip()} (exit {rc})")
    return out

  def upload(self, host_path: str, sandbox_path: str) -> None:
    if not os.path.isdir(host_path):
      return super().upload(host_path, sandbox_path)  # a file: _write_stream
    dst = self._abs(sandbox_path)
    with tempfile.TemporaryFile() as f:
      stream_from_dir(host_path, f, *self._user_ids())
      f.seek(0)
      rc, _, err = self._run(["unpack", dst], f)
    if rc != 0:
      raise OSError(f"upload {host_path} -> {dst}: {err.decode(errors='replace').strip()}")

  def _pack(self, where: str, names: list[str], out, cap: int, skip=frozenset()) -> None:
    with tempfile.TemporaryFile() as stream:
      rc, _, err = self._run(["pack", where, *names], None, stream, self._io_timeout(), cap)
      if rc == 3:
        raise FileNotFoundError(f"{where}: {names[0]}: {err.decode(errors='replace').strip()}")
      if rc != 0:
        raise SandboxError(f"pack {names} failed (exit {rc}): {err.decode(errors='replace')}")
      stream.seek(0)
      tar_from_stream(stream, out, cap, skip)

  def _tar_out(self, src: str, f, cap: int) -> None:
    self._pack(os.path.dirname(src) or "/", [os.path.basename(src) or "."], f, cap)

  def _snapshot_to(self, f, cap: int) -> None:
    roots = [r.lstrip("/") for r in self.writable_roots()]
    self._pack("/", roots, f, cap, skip=frozenset(roots))

  def _restore_from(self, path: str) -> None:
    with tempfile.TemporaryFile() as stream, tarfile.open(path) as tf:
      stream_from_tar(tf, stream)
      stream.seek(0)
      rc, _, err = self._run(["restore", *self.writable_roots()], stream, None, self._io_timeout())
    if rc != 0:
      raise SandboxError(f"restore failed (exit {rc}): {err.decode(errors='replace')[-2000:]}")
