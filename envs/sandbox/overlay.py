"""The container-mode root of a bubblewrap sandbox on the host side: attach and snapshot it.

The overlay (userns.py) is attached at a private host folder only until bubblewrap has taken
it into the sandbox's mount namespace. A snapshot of container mode is the upper layer, read
host-side through its fd by the host's own `tar` (sparse-aware, through a capped pipe), never
by a process in the sandbox; a restore unpacks into a fresh upper layer, which the sandbox
then restarts on.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

from envs.sandbox import common, pipes, userns
from envs.sandbox.base import SandboxError


def mount_root(rootfs: pathlib.Path, userns_fd: int, upper_fd: int, owner: int, name: str) -> str:
  """Attaches the overlay at a fresh host folder owned by `owner`; returns the folder."""
  target = common.mount_dir() / name
  target.mkdir(mode=0o700, exist_ok=True)
  os.chown(target, owner, owner)
  userns.attach_root(str(rootfs), userns_fd, upper_fd, str(target))
  return str(target)


def release_root(target: str) -> None:
  """Once the sandbox holds its own copy of the mount."""
  userns.detach(target)
  os.rmdir(target)


def _tar(upper: int) -> list[str]:
  return ["tar", "-C", f"/proc/self/fd/{upper}/u", "--xattrs", "--xattrs-include=*"]


def snapshot_upper(upper: int, f, cap: int, timeout_s: float) -> None:
  """Writes the upper layer as a tar to `f`, at most `cap` bytes (else SandboxError)."""
  argv = _tar(upper) + ["--sparse", "--numeric-owner", "-cf", "-", "."]
  rc, err = pipes.run_capped(argv, f, cap, timeout_s, pass_fds=(upper,))
  if rc not in (0, 1):  # 1: a file changed while being read
    raise SandboxError(f"snapshot failed (exit {rc}): {err[-2000:]}")


def restore_upper(path: str, size_bytes: int, base: int, timeout_s: float) -> int:
  """A fresh upper layer (its fd) holding the snapshot at `path` (one this sandbox issued)."""
  upper = userns.new_upper(size_bytes, base)
  try:
    argv = _tar(upper) + ["--numeric-owner", "--same-owner", "-xpf", path]
    p = subprocess.run(argv, capture_output=True, pass_fds=(upper,), timeout=timeout_s)
    if p.returncode != 0:
      raise SandboxError(f"restore failed: {p.stderr.decode(errors='replace')[-2000:]}")
  except BaseException:
    os.close(upper)
    raise
  return upper
