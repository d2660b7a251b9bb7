"""User namespaces and the overlay root of a bubblewrap sandbox (host root only).

Each sandbox leases a block of 65536 host uids and gets its own user namespace mapping inside
uids 0..65535 onto that block, so uid 0 inside is an unprivileged uid outside, and no two
sandboxes share a host uid. Its root filesystem is an overlay: the image tree as the lower
layer through an *idmapped* mount (so the image's root-owned files are owned by uid 0 inside,
while the cache on disk stays owned by the host's root), a per-sandbox tmpfs (size-capped) as
the upper layer. The mounts are made with the new mount API (open_tree, fsopen, fsmount), so
the overlay's options name only `/proc/self/fd/N` paths: /proc/self/mountinfo inside shows no
host path. The overlay is attached at a host folder only until bubblewrap has taken it into the
sandbox's own mount namespace; the upper tmpfs is kept as an fd (snapshots read it).
"""

from __future__ import annotations

import ctypes
import os
import random
import socket
import subprocess

from envs.sandbox.base import SandboxError

RANGE = 65536  # uids (and gids) per sandbox
_BASE = int(os.environ.get("AGENTRL_UIDRANGE_BASE", "2000000000"))
_COUNT = (0xFFFFFFFE - _BASE) // RANGE

_NR = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432}
_NR["mount_setattr"] = 442
_OPEN_TREE_CLONE, _CLOEXEC, _AT_EMPTY_PATH, _AT_FDCWD = 1, 0o2000000, 0x1000, -100
_MOUNT_ATTR_IDMAP, _MOUNT_ATTR_RDONLY = 0x100000, 0x1
_FSCONFIG_SET_STRING, _FSCONFIG_CMD_CREATE, _MOVE_MOUNT_F_EMPTY_PATH = 1, 6, 4
_LIBC = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
  _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def _sys(name: str, *args) -> int:
  r = _LIBC.syscall(_NR[name], *args)
  if r < 0:
    e = ctypes.get_errno()
    raise OSError(e, f"{name}: {os.strerror(e)}")
  return r


class RangeLease:
  """A block of RANGE host uids no other live sandbox uses (an abstract socket is the lock)."""

  def __init__(self):
    start = random.randrange(_COUNT)
    for i in range(_COUNT):
      n = (start + i) % _COUNT
      s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
      try:
        s.bind(b"\0agentrl-uidrange-%d" % n)
      except OSError:
        s.close()
        continue
      self.base, self._sock = _BASE + n * RANGE, s
      return
    raise SandboxError("no free sandbox uid range")

  def release(self) -> None:
    self._sock.close()


# The namespace's first process: waits for its maps, re-execs (to gain uid 0's capabilities in
# the namespace, lost at the first exec while unmapped), then forbids nested user namespaces
# (a per-namespace limit; the host's is untouched) and reports.
_NS_INIT = "read x; exec /bin/sh -c 'echo 0 > /proc/sys/user/max_user_namespaces && echo ok'"


def new_userns(base: int) -> int:
  """An fd of a new user namespace, owned by host uid `base`, mapping 0..RANGE-1 to base..."""
  u = str(base)
  argv = ["setpriv", f"--reuid={u}", f"--regid={u}", "--clear-groups", "unshare", "-U"]
  p = subprocess.Popen(
    [*argv, "/bin/sh", "-c", _NS_INIT], stdin=subprocess.PIPE, stdout=subprocess.PIPE
  )
  try:
    mine = os.readlink("/proc/self/ns/user")
    for _ in range(20000):  # unshare runs within milliseconds
      if os.readlink(f"/proc/{p.pid}/ns/user") != mine:
        break
      os.sched_yield()
    else:
      raise SandboxError("unshare -U did not create a user namespace")
    for f in ("uid_map", "gid_map"):
      with open(f"/proc/{p.pid}/{f}", "w") as fh:
        fh.write(f"0 {base} {RANGE}\n")
    fd = os.open(f"/proc/{p.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    out, _ = p.communicate(b"go\n", timeout=10)
    if out.strip() != b"ok":
      os.close(fd)
      raise SandboxError("could not limit nested user namespaces")
    return fd
  except OSError as e:
    raise SandboxError(f"could not set up the sandbox user namespace: {e}") from e
  finally:
    if p.poll() is None:
      p.kill()
      p.wait()


def _fs(fstype: bytes, opts: list[tuple[bytes, bytes]], attrs: int = 0) -> int:
  f = _sys("fsopen", fstype, 1)
  try:
    for k, v in opts:
      _sys("fsconfig", f, _FSCONFIG_SET_STRING, k, v, 0)
    _sys("fsconfig", f, _FSCONFIG_CMD_CREATE, None, None, 0)
    return _sys("fsmount", f, 1, attrs)
  finally:
    os.close(f)


def new_upper(size_bytes: int, base: int) -> int:
  """A detached tmpfs with `u` (owned by the namespace's root) and `w` (overlay work dir)."""
  t = _fs(b"tmpfs", [(b"size", str(size_bytes).encode()), (b"mode", b"0755")])
  for d in ("u", "w"):
    os.mkdir(d, 0o755, dir_fd=t)
  os.chown("u", base, base, dir_fd=t)
  return t


def attach_root(lower: str, userns_fd: int, upper_fd: int, target: str) -> None:
  """Mounts the overlay (idmapped `lower` + the tmpfs `upper_fd`) at the host folder `target`."""
  a = _sys("open_tree", _AT_FDCWD, lower.encode(), _OPEN_TREE_CLONE | _CLOEXEC)
  try:
    attr = _MountAttr(_MOUNT_ATTR_IDMAP, 0, 0, userns_fd)
    _sys("mount_setattr", a, b"", _AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr))
    opts = [(b"lowerdir", f"/proc/self/fd/{a}".encode())]
    opts += [(b"upperdir", f"/proc/self/fd/{upper_fd}/u".encode())]
    opts += [(b"workdir", f"/proc/self/fd/{upper_fd}/w".encode())]
    o = _fs(b"overlay", opts)
  finally:
    os.close(a)
  try:
    _sys("move_mount", o, b"", _AT_FDCWD, target.encode(), _MOVE_MOUNT_F_EMPTY_PATH)
  finally:
    os.close(o)


def detach(target: str) -> None:
  """Lazily unmounts `target` from the host's mount namespace (the sandbox keeps its copy)."""
  if _LIBC.umount2(target.encode(), 2) != 0:  # MNT_DETACH
    e = ctypes.get_errno()
    if e not in (22, 2):  # EINVAL: not mounted; ENOENT: gone
      raise OSError(e, f"umount {target}: {os.strerror(e)}")
