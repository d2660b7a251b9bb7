"""The sandbox's merged root read host-side from its overlay layers (no process of the sandbox).

A path resolves as the overlay resolves it: the writable upper layer first (a 0/0 character
device there is a whiteout: the path is gone; an opaque folder hides the lower layers below
it), then each read-only lower layer in order. Links are never followed by the host's own
kernel: `resolve` follows them inside the root, so a link cannot lead the host out of it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat

_OPAQUE = (b"trusted.overlay.opaque", b"user.overlay.opaque")
_MAX_HOPS = 40  # the kernel's own limit on links in one path


def _whiteout(st: os.stat_result) -> bool:
  return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _opaque(path: str) -> bool:
  for name in _OPAQUE:
    try:
      if os.getxattr(path, name, follow_symlinks=False) == b"y":
        return True
    except OSError:
      pass
  return False


def _real_dir(top: str, rel: str) -> str | None:
  """The host path of folder `rel` in layer `top` if each step is a folder (never a link)."""
  path = top
  for part in [p for p in rel.split("/") if p]:
    path = os.path.join(path, part)
    try:
      if not stat.S_ISDIR(os.lstat(path).st_mode):
        return None
    except OSError:
      return None
  return path


@dataclasses.dataclass(frozen=True)
class RootView:
  """`upper`: the writable layer (a host folder); `lowers`: the image's layers, top first."""

  upper: str
  lowers: tuple[str, ...]

  def locate(self, rel: str) -> tuple[str, str] | None:
    """("upper" | "lower", host path) of `rel` (relative to /, no link in its folders
    followed), or None when the sandbox has no such path."""
    parts = [p for p in rel.split("/") if p]
    if not parts:
      return "upper", self.upper
    for top in (self.upper,) + self.lowers:
      path, hidden = top, False
      for i, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
          st = os.lstat(path)
        except OSError:
          break
        if _whiteout(st) or (i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode)):
          return None  # gone, or below a file: ENOTDIR
        if i == len(parts) - 1:
          return ("upper" if top == self.upper else "lower"), path
        hidden = hidden or _opaque(path)
      if hidden:
        return None
    return None

  def _open(self, rel: str):
    """A binary file object of regular file `rel` (no link followed), None if there is none."""
    found = self.locate(rel)
    if found is None:
      return None
    try:
      fd = os.open(found[1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
      return None
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
      f.close()
      return None
    return f

  def read(self, rel: str, limit: int = 64 << 20) -> bytes | None:
    """The bytes of regular file `rel` (at most `limit`), None if there is none."""
    f = self._open(rel)
    if f is None:
      return None
    with f:
      return f.read(limit)

  def sha256(self, rel: str) -> str | None:
    """The sha256 (hex) of all the bytes of regular file `rel`; None if there is none."""
    f = self._open(rel)
    if f is None:
      return None
    with f:
      return hashlib.file_digest(f, "sha256").hexdigest()

  def readlink(self, rel: str) -> str | None:
    found = self.locate(rel)
    try:
      return os.readlink(found[1]) if found else None
    except OSError:
      return None

  def listdir(self, rel: str) -> list[str]:
    """Names in folder `rel` of the merged root (upper and, unless opaque, lower names)."""
    names: set[str] = set()
    gone: set[str] = set()
    for top in (self.upper,) + self.lowers:
      path = _real_dir(top, rel)
      try:
        entries = list(os.scandir(path)) if path else []
      except OSError:
        continue
      for e in entries:
        try:
          (gone if _whiteout(e.stat(follow_symlinks=False)) else names).add(e.name)
        except OSError:
          pass
      names -= gone
      if top == self.upper and path and _opaque(path):
        break
    return sorted(names - gone)

  def resolve(self, rel: str) -> str | None:
    """`rel` with every link followed inside the root (relative to /), None when it dangles
    or loops. Each hop is read from the layers, so a link the agent made counts."""
    parts, done, hops = [p for p in rel.split("/") if p], [], 0
    while parts:
      part = parts.pop(0)
      if part == ".":
        continue
      if part == "..":
        done = done[:-1]
        continue
      cur = "/".join(done + [part])
      if self.locate(cur) is None:
        return None
      target = self.readlink(cur)
      if target is None:
        done.append(part)
        continue
      hops += 1
      if hops > _MAX_HOPS:
        return None
      base = [] if target.startswith("/") else done
      parts, done = base + [p for p in target.split("/") if p] + parts, []
    return "/".join(done)
