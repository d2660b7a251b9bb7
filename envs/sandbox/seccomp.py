"""The bubblewrap sandboxes' seccomp filter: compiled once per process with libseccomp
(pyseccomp), loaded by bwrap (`--seccomp FD`) for pid 1 and by a tiny exec wrapper for every
exec (they enter with nsenter, so they are not pid 1's descendants and inherit nothing).

Denied with EPERM: tracing other processes and stealing their fds (ptrace, process_vm_*,
pidfd_getfd), the kernel keyring (add_key, keyctl, request_key), mounting and namespace
(mount, umount2, pivot_root, the new mount API), bpf, perf_event_open, userfaultfd, io_uring
(its requests bypass seccomp; Docker's default profile refuses it too), kernel modules and
kexec, swap, clock and reboot. clone3 answers ENOSYS, so libc falls back to clone.
The wrapper runs host-side just before nsenter, so setns stays allowed: new namespaces are
refused anyway (no CAP_SYS_ADMIN; nested user namespaces are limited to 0).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

from envs.sandbox.base import SandboxError

DENIED = (
  "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "add_key", "keyctl",
  "request_key", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen",
  "fsconfig", "fsmount", "fspick", "mount_setattr", "bpf",
  "perf_event_open", "userfaultfd", "init_module", "finit_module", "delete_module",
  "kexec_load", "kexec_file_load", "swapon", "swapoff", "reboot", "settimeofday",
  "clock_settime", "clock_adjtime", "adjtimex", "acct", "quotactl", "lookup_dcookie",
  "iopl", "ioperm", "syslog", "personality", "io_uring_setup", "io_uring_enter",
  "io_uring_register",
)  # fmt: skip

# argv: FILTER KEEP_CAPS_HEX PROG ARGS...: drops every capability not in the mask from the
# bounding set (after nsenter's setns, which had reset it; a non-root uid has none to use), closes inherited fds (its own
# binary and the filter, passed as /proc/self/fd/N), sets no-new-privileges, loads the filter,
# execs PROG. Static, so it runs in any image (it is exec'd from inside the sandbox's root).
_WRAPPER_C = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
int main(int argc, char **argv) {
  static unsigned char buf[1 << 16];
  if (argc < 4) return 127;
  FILE *f = fopen(argv[1], "rb");
  if (!f) { perror("seccomp filter"); return 127; }
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  unsigned long long keep = strtoull(argv[2], NULL, 16);
  for (int c = 0; c < 64; c++)
    if (!((keep >> c) & 1) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) && c < 41 && getuid() == 0) {
      perror("capbset"); return 127;
    }
  syscall(SYS_close_range, 3, ~0U, 0);
  struct sock_fprog prog = { .len = (unsigned short)(n / 8), .filter = (struct sock_filter *)buf };
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
    perror("seccomp"); return 127;
  }
  execvp(argv[3], argv + 3);
  perror("exec"); return 127;
}
"""


def _bpf() -> bytes:
  import pyseccomp  # noqa: PLC0415 (only when bubblewrap is used)

  f = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
  for name in DENIED:
    try:
      f.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    except Exception:  # noqa: BLE001, S112 (a syscall this architecture lacks)
      continue
  f.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
  with tempfile.TemporaryFile() as t:
    f.export_bpf(t)
    t.seek(0)
    return t.read()


def _state_dir() -> pathlib.Path:
  from envs.sandbox import common  # noqa: PLC0415

  d = common.runtime_root() / "seccomp"
  d.mkdir(mode=0o755, exist_ok=True)
  return d


@functools.lru_cache(maxsize=1)
def filter_path() -> str:
  """A host file holding the compiled BPF program (world-readable: the sandbox uid loads it)."""
  try:
    prog = _bpf()
  except (ImportError, OSError) as e:
    raise SandboxError(f"cannot compile the seccomp filter (pip install pyseccomp): {e}") from e
  p = _state_dir() / f"filter-{hashlib.sha256(prog).hexdigest()[:12]}.bpf"
  if not p.exists():
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(prog)
    tmp.chmod(0o644)
    os.replace(tmp, p)
  return str(p)


@functools.lru_cache(maxsize=1)
def wrapper_path() -> str:
  """The exec wrapper binary (built once with the C compiler; cached by source hash)."""
  return build_static(_WRAPPER_C, "seccomp-exec")


def build_static(source: str, stem: str) -> str:
  """A static binary of C `source` in the root-only state folder (cached by source hash)."""
  src = source.encode()
  p = _state_dir() / f"{stem}-{hashlib.sha256(src).hexdigest()[:12]}"
  if p.exists():
    return str(p)
  cc = shutil.which("cc") or shutil.which("gcc")
  if cc is None:
    raise SandboxError(f"a C compiler (cc) is needed once to build the sandbox's {stem}")
  with tempfile.TemporaryDirectory() as tmp:
    c = pathlib.Path(tmp, "w.c")
    c.write_bytes(src)
    out = pathlib.Path(tmp, "w")
    r = subprocess.run(
      [cc, "-O2", "-static", "-o", str(out), str(c)], capture_output=True, text=True
    )
    if r.returncode != 0:
      raise SandboxError(f"building the sandbox's {stem} failed: {r.stderr[-2000:]}")
    out.chmod(0o755)
    tmp_p = p.with_suffix(f".{os.getpid()}.tmp")
    shutil.copy(out, tmp_p)
    os.replace(tmp_p, p)
  return str(p)


_CAP_BITS = {
  "chown": 0, "dac_override": 1, "dac_read_search": 2, "fowner": 3, "fsetid": 4, "kill": 5,
  "setgid": 6, "setuid": 7, "setpcap": 8, "net_bind_service": 10, "net_raw": 13,
  "sys_chroot": 18, "mknod": 27, "audit_write": 29, "setfcap": 31,
}  # fmt: skip


class ExecFds:
  """The wrapper and the filter opened for one exec (passed to it as /proc/self/fd/N)."""

  def __init__(self):
    self.wrapper = os.open(wrapper_path(), os.O_RDONLY | os.O_CLOEXEC)
    self.filter = os.open(filter_path(), os.O_RDONLY | os.O_CLOEXEC)

  def argv(self, keep_caps: tuple[str, ...]) -> list[str]:
    mask = sum(1 << _CAP_BITS[c] for c in keep_caps)
    return [f"/proc/self/fd/{self.wrapper}", f"/proc/self/fd/{self.filter}", f"{mask:x}"]

  def close(self) -> None:
    os.close(self.wrapper)
    os.close(self.filter)
