"""Which changed system paths are a genuine package's files: the tamper scan's one exemption.

With package egress (`network="packages"`) a task's own solution may `pip install` or
`apt-get install`, which writes below the paths system_guard protects. Nothing the sandbox
says about it can be trusted (the agent is root: it can forge dist-info RECORDs and dpkg's
status), so the host proves each change itself: it fetches the claimed wheel or .deb from the
sources the sandbox was given (genuine_pip.py, genuine_apt.py) and a changed path is excused
only when its content, or its link target, equals that package's file at the same path (a
conffile also at `X.dpkg-new`, where dpkg unpacks it until the package is configured).
Besides those: pip's own metadata inside a verified dist-info; a link into /etc/alternatives
whose chain ends, inside the sandbox's root, at a path of the image, unchanged since set-up or
itself genuine; /etc/ld.so.cache (and gdk-pixbuf's, GTK's and GIO's module caches) when every
library (module) it lists lies below a protected prefix (so each of those is checked in turn).
A file the fingerprint left unhashed (past its byte budget) is hashed here, whole, when a
genuine package has a file at its path. A genuine `.pth` that runs code (an `import` line)
passes only from the apt archive, never from a pip index; every deletion stays flagged; a
package the host cannot fetch leaves a note.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import struct

from envs.sandbox import genuine_apt, genuine_pip, system_guard
from envs.sandbox.egress_sources import PackageSources
from envs.sandbox.rootview import RootView

LD_CACHE = "etc/ld.so.cache"
# Module caches that postinsts and triggers write (no package ships them): gdk-pixbuf's and
# GTK's (module paths in quotes), GIO's (module names in its own folder)
MODULE_CACHE = re.compile(
  r"usr/lib/[^/]+/(?:gdk-pixbuf-2\.0/[^/]+/loaders|gtk-[23]\.0/[^/]+/immodules)\.cache"
)
GIO_CACHE = re.compile(r"usr/lib/[^/]+/gio/modules/giomodule\.cache")
_LD_MAGIC = b"glibc-ld.so.cache1.1"
_LD_HEADER, _LD_ENTRY = 48, 24  # glibc's cache_file_new and file_entry_new


def cache_dir() -> str:
  """$AGENTRL_GENUINE_CACHE, else `genuine/` beside the image cache ($AGENTRL_CACHE)."""
  base = os.environ.get("AGENTRL_CACHE")
  if not base and os.geteuid() == 0:
    base = "/var/cache/agentrl"
  base = base or os.path.join(os.path.expanduser("~"), ".cache", "agentrl")
  return os.environ.get("AGENTRL_GENUINE_CACHE") or os.path.join(base, "genuine")


def content(digest: str | None) -> str | None:
  """ "f:<sha256>" of a regular file's fingerprint digest, "l:<target>" of a link's, else None
  (a whiteout, a file too large to hash, the daemon's bare change kind)."""
  parts = (digest or "").split(":", 4)
  if len(parts) < 5 or not parts[0].isdigit():
    return None
  kind = int(parts[0], 8)
  if stat.S_ISREG(kind) and len(parts[4]) == 64:
    return f"f:{parts[4]}"
  return f"l:{parts[4]}" if stat.S_ISLNK(kind) else None


def ld_cache_paths(data: bytes) -> list[str] | None:
  """The library paths of a glibc ld.so.cache (the new format, what glibc >= 2.32 writes);
  None when it is not one or an entry points outside it."""
  if not data.startswith(_LD_MAGIC) or len(data) < _LD_HEADER:
    return None
  (nlibs,) = struct.unpack_from("<I", data, 20)
  if len(data) < _LD_HEADER + nlibs * _LD_ENTRY:
    return None
  out = []
  for i in range(nlibs):
    _, _, value = struct.unpack_from("<iII", data, _LD_HEADER + i * _LD_ENTRY)
    end = data.find(b"\0", value)
    if value >= len(data) or end < 0:
      return None
    out.append(data[value:end].decode("utf-8", "replace"))
  return out


def _ld_cache_ok(data: bytes | None) -> bool:
  paths = ld_cache_paths(data or b"")
  return paths is not None and all(
    p.startswith("/") and posixpath.normpath(p) == p and system_guard.protected(p[1:])
    for p in paths
  )


def module_cache_paths(data: bytes) -> list[str] | None:
  """The module paths of a gdk-pixbuf loaders.cache or GTK immodules.cache: a module is a block
  of lines ended by a blank line, its first line the module's path in quotes; the lines after
  it (name, MIME types, signatures, locale folder) may look like paths (XPM's `"/* XPM */"`)
  and load nothing. Every line after a blank or comment line (and the first) counts as a
  module's, as either reader (glib's, pango's) could take it. None when one of those is not
  an absolute quoted path without escapes, or the text has a NUL, a line end other than LF or
  a backslash before one (pango joins such lines; signatures have escapes like `\\020`)."""
  if b"\r" in data or b"\0" in data or re.search(rb"\\(\n|$)", data):
    return None
  out, first = [], True
  for line in data.decode("utf-8", "replace").split("\n"):
    line = line.lstrip(" \t\v\f")  # glib's g_ascii_isspace
    if not line or line.startswith("#"):
      first = True
    elif first:
      m = re.fullmatch(r'"(/[^"\\]*)"[ \t]*', line)
      if m is None:
        return None
      out.append(m.group(1))
      first = False
  return out


def _gio_cache_ok(data: bytes | None) -> bool:
  """GIO's giomodule.cache: `name: extension points` per line. GIO loads only the modules it
  finds in the cache's own (protected) folder; a name with a `/` is refused all the same."""
  lines = [ln for ln in (data or b"").decode("utf-8", "replace").split("\n") if ln.strip()]
  return bool(lines) and all(re.fullmatch(r"[\w.+-]+\.so: [\w.,-]*", ln) for ln in lines)


def _module_cache_ok(data: bytes | None) -> bool:
  """A module cache whose every module path is a normal path below a protected prefix (so each
  module it makes a program load is itself checked), and that names one at least."""
  paths = module_cache_paths(data or b"")
  return bool(paths) and all(
    posixpath.normpath(p) == p and system_guard.protected(p[1:]) for p in paths
  )


def _runs_code(data: bytes | None) -> bool:
  """A .pth line Python's `site` executes (one that starts with `import`)."""
  return any(ln.startswith((b"import ", b"import\t")) for ln in (data or b"").splitlines())


def _file_content(view: RootView, rel: str) -> str | None:
  digest = view.sha256(rel)
  return None if digest is None else f"f:{digest}"


def _unhashed(digest: str | None) -> bool:
  """A regular file the fingerprint left unhashed (past its byte budget: "...:size=N")."""
  parts = (digest or "").split(":", 4)
  return (
    len(parts) == 5
    and parts[0].isdigit()
    and stat.S_ISREG(int(parts[0], 8))
    and parts[4].startswith("size=")
  )


class _Judge:
  """One grading's verdicts: the genuine files and what is already excused."""

  def __init__(self, baseline, now, view: RootView, genuine: dict[str, set[str]]):
    self.baseline, self.now, self.view, self.genuine = baseline, now, view, genuine
    self.ok: set[str] = set()

  def trusted(self, rel: str) -> bool:
    """Path `rel` holds what the image, the set-up or a genuine package put there."""
    where = self.view.locate(rel)
    if where is None:
      return False
    if where[0] == "lower" or rel in self.ok:
      return True
    if rel in self.now:
      return self.baseline.get(rel) == self.now[rel]
    return _file_content(self.view, rel) in self.genuine.get(rel, ())

  def alternative(self, rel: str) -> bool:
    """A link into /etc/alternatives whose chain ends at a trusted path."""
    link = content(self.now.get(rel)) or ""
    if not link.startswith("l:/etc/alternatives/"):
      return False
    end = self.view.resolve(rel)
    return end is not None and end != rel and self.trusted(end)


def excuse(
  diff: list[str],
  baseline: dict[str, str],
  now: dict[str, str],
  view: RootView,
  sources: PackageSources,
  cache: str | None = None,
) -> tuple[list[str], list[str]]:
  """(the paths of `diff` still flagged, notes on packages that could not be verified)."""
  cache = cache or cache_dir()
  pip_files, pip_written, notes = genuine_pip.genuine_files(diff, view, sources, cache)
  apt_files, apt_notes = {}, []
  if _dpkg_ran(view):
    apt_files, apt_notes = genuine_apt.genuine_files(view, sources, cache)
  genuine = {p: pip_files.get(p, set()) | apt_files.get(p, set()) for p in {*pip_files, *apt_files}}
  judge = _Judge(baseline, now, view, genuine)
  for rel in diff:
    c = content(now.get(rel))
    if c is None and _unhashed(now.get(rel)) and (rel in genuine or rel in pip_written):
      # the fingerprint stops hashing after 1 GiB (a toolchain's install is more): the host
      # hashes a file a genuine package has at that path itself, all of its bytes
      c = _file_content(view, rel)
    if rel in pip_written and c is not None and c.startswith("f:"):
      judge.ok.add(rel)
    elif c is not None and c in genuine.get(rel, ()):
      # a .pth that runs code passes only from the machine's apt archive (curated, like
      # python3-setuptools' distutils-precedence.pth), never from a pip index anyone uploads to
      if rel.endswith(".pth") and c not in apt_files.get(rel, ()) and _runs_code(view.read(rel)):
        notes.append(f"{rel}: a genuine .pth from a pip index that runs code at start-up")
      else:
        judge.ok.add(rel)
  rest = [r for r in diff if r not in judge.ok]
  judge.ok |= {r for r in rest if judge.alternative(r)}
  if LD_CACHE in rest and (content(now.get(LD_CACHE)) or "").startswith("f:"):
    if _ld_cache_ok(view.read(LD_CACHE)):
      judge.ok.add(LD_CACHE)
  for rel in rest:  # module caches a postinst writes: every module they name is itself checked
    if (content(now.get(rel)) or "").startswith("f:"):
      if MODULE_CACHE.fullmatch(rel) and _module_cache_ok(view.read(rel)):
        judge.ok.add(rel)
      elif GIO_CACHE.fullmatch(rel) and _gio_cache_ok(view.read(rel)):
        judge.ok.add(rel)
  return [r for r in diff if r not in judge.ok], notes + apt_notes


def _dpkg_ran(view: RootView) -> bool:
  """Whether dpkg's status or journal differs from the image's (in the upper layer)."""
  paths = [genuine_apt.STATUS, *genuine_apt.journal(view)]
  return any((view.locate(p) or ("",))[0] == "upper" for p in paths)
