"""What the agent changed in the grader's toolchain: a host-side fingerprint of the writable layer.

In container mode the agent is uid 0 with a writable root, so it could rewrite the very
programs the grader runs in the sandbox (pytest, the interpreter, its site packages, bash
and its profile, the dynamic loader and libraries). The writable layer of the root (the
overlay's upper layer on bwrap, the container's UpperDir on Docker) holds exactly what
changed since the image, and the host reads it itself, so a forged tool cannot hide
anything. `fingerprint` digests every file, link and whiteout (a deletion) under the
protected prefixes (a folder is copied up whenever a child changes, so folders themselves
are not); `changed` names what differs from a fingerprint taken right after the task's
set-up. Bytecode caches are
left out: the grader's Python never reads them (`-X pycache_prefix` outside the sandbox's
reach), and an innocent run of Python as root writes them. /usr/local/bin comes first on
PATH: an entry there counts when it replaces a file of the image or shadows a command the
image has in a system folder (`cat`, `tar`, `python3`); a new tool of its own (what `pip
install` as root writes there) does not. `mounts` adds the sandbox's mount table, so a mount
made after set-up (over the test framework, say) shows as a change too. With package egress,
genuine.py excuses the changes the host proves are a genuine package's files.
"""

from __future__ import annotations

import hashlib
import os
import stat

# Relative to /: what the grader's in-sandbox commands execute or load.
PROTECTED = (
  "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr/bin", "usr/sbin", "usr/lib",
  "usr/lib32", "usr/lib64", "usr/libx32", "usr/libexec", "usr/local/lib", "usr/local/sbin",
  "etc/profile", "etc/profile.d", "etc/bash.bashrc", "etc/ld.so.preload", "etc/ld.so.conf",
  "etc/ld.so.conf.d", "etc/ld.so.cache",
)  # fmt: skip
SHADOWING = ("usr/local/bin",)  # before the system folders on PATH
_SYSTEM_BINS = ("usr/sbin", "usr/bin", "sbin", "bin")
_MAX_HASHED = 1 << 30  # bytes read at most; beyond: the entry's size stands in for its content


def protected(rel: str, lowers: tuple[str, ...] | None = None) -> bool:
  """Whether `rel` is something the grader runs or loads; `lowers`: the image's read-only
  layers (host folders), None when unknown (then all of SHADOWING counts)."""
  folder, _, name = rel.rpartition("/")
  if folder in SHADOWING:
    return lowers is None or any(_in_image(lower, rel, name) for lower in lowers)
  # etc/python3*: where Debian's sitecustomize.py lives
  return rel.startswith("etc/python") or any(rel == p or rel.startswith(p + "/") for p in PROTECTED)


def _in_image(lower: str, rel: str, name: str) -> bool:
  """`rel` is a file of the image, or `name` a command in one of its system folders."""
  paths = [rel] + [f"{d}/{name}" for d in _SYSTEM_BINS]
  return any(os.path.lexists(os.path.join(lower, p)) for p in paths)


def mounts(mountinfo: str) -> dict[str, str]:
  """{"mount:<mount point>": "<fs type> <options> <root>"} of a /proc/PID/mountinfo text
  (mount ids and fd-named sources left out: they differ between identical start-ups)."""
  out = {}
  for line in mountinfo.splitlines():
    pre, _, post = line.partition(" - ")
    f, g = pre.split(), post.split()
    if len(f) >= 6 and g:
      key = f"mount:{f[4]}"
      out[key] = " ".join(filter(None, (out.get(key), g[0], f[5], f[3])))  # stacked: all
  return out


def _digest(path: str, st: os.stat_result, budget: list[int]) -> str:
  kind = stat.S_IFMT(st.st_mode)
  head = f"{kind:o}:{stat.S_IMODE(st.st_mode):o}:{st.st_uid}:{st.st_gid}"
  if stat.S_ISLNK(st.st_mode):
    return f"{head}:{os.readlink(path)}"
  if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):  # 0/0: an overlay whiteout
    return f"{head}:{st.st_rdev}"
  if not stat.S_ISREG(st.st_mode):
    return head
  if budget[0] < st.st_size:
    return f"{head}:size={st.st_size}"
  budget[0] -= st.st_size
  h = hashlib.sha256()
  fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
  try:
    while chunk := os.read(fd, 1 << 20):
      h.update(chunk)
  finally:
    os.close(fd)
  return f"{head}:{h.hexdigest()}"


def fingerprint(upper: str, lowers: tuple[str, ...] | None = None) -> dict[str, str]:
  """{path relative to /: digest} of the protected entries of writable layer `upper` over
  the image's layers `lowers` (see `protected`)."""
  out, budget = {}, [_MAX_HASHED]
  for top, dirs, files in os.walk(upper):  # never follows links
    rel_top = os.path.relpath(top, upper)
    rel_top = "" if rel_top == "." else rel_top
    # a link to a folder is listed with the folders (the host's own folder, when its target
    # exists here) but never walked: it is an entry like a file
    links = [d for d in dirs if os.path.islink(os.path.join(top, d))]
    dirs[:] = [d for d in dirs if d != "__pycache__" and d not in links]
    for name in files + links:  # folders: copied up when a child changes
      if name.endswith(".pyc"):
        continue
      rel = f"{rel_top}/{name}" if rel_top else name
      if not protected(rel, lowers):
        continue
      path = os.path.join(top, name)
      try:
        out[rel] = _digest(path, os.lstat(path), budget)
      except OSError:  # vanished while we looked (an exec still running): a change anyway
        out[rel] = "unreadable"
  return out


def changed(baseline: dict[str, str], now: dict[str, str]) -> list[str]:
  """Protected paths (and mounts) new, different or gone since `baseline` (sorted)."""
  return sorted(p for p in now.keys() | baseline.keys() if baseline.get(p) != now.get(p))
