"""Issue 36: no file operation runs a program the agent could have written outside the
sandbox's pid namespace, cgroups and seccomp filter; mounts after set-up are refused or seen;
io_uring is refused.

The agent (uid 0 in container mode) plants spies first on PATH (/usr/local/bin) and in place
of /usr/bin/tar; each spy logs where it ran (its pid namespace, NoNewPrivs, Seccomp) and then
runs the real tool. Every logged line must read exactly as an exec's own does (before the
fix, bwrap's transfers ran them outside: lines without the pid namespace or the filter).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from envs.sandbox import system_guard, testing
from envs.sandbox.testing import make

backend, mode, sandbox_image = testing.backend, testing.mode, testing.sandbox_image  # fixtures

LOG = "/var/tmp/.spy-log"
TOOLS = ("cat", "tar", "mkdir", "chmod", "chown", "find", "rm", "dirname", "basename")
WHERE = "echo \"$(readlink /proc/self/ns/pid) $(grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\\t\\n')\""


def _spy(real: str) -> str:
  return f'#!/bin/sh\n{WHERE} >> {LOG} 2>/dev/null\nexec {real} "$@"\n'


def _plant(sb) -> bool:
  """As the agent: True when the spies are in place (a writable root)."""
  r = sb.exec("mv /usr/bin/tar /usr/bin/.tar-real && touch /var/tmp/.spy-log")
  if r.exit_code != 0:
    return False
  spies = [("/usr/bin/tar", _spy("/usr/bin/.tar-real"))]
  spies += [(f"/usr/local/bin/{t}", _spy(f"/usr/bin/{t}")) for t in TOOLS]
  for path, text in spies:
    r = sb.exec(f"/usr/bin/cat > {path} && /usr/bin/chmod 755 {path}", stdin=text)
    assert r.exit_code == 0, r.stderr
  return True


def _log(sb) -> list[str]:
  r = sb.exec(f"/usr/bin/cat {LOG}")
  return r.stdout.splitlines() if r.exit_code == 0 else []


def _check(sb, op: str, seen: int, must_run: bool = False) -> int:
  """Every spy line after the first `seen` reads as an exec's; with `must_run`, some spy ran."""
  inside = sb.exec(WHERE).stdout.strip()
  assert inside.endswith("NoNewPrivs:1Seccomp:2") or "Docker" in type(sb).__name__, inside
  lines = _log(sb)
  outside = [ln for ln in lines[seen:] if ln != inside]
  assert not outside, f"{op}: a planted program ran outside the sandbox: {outside[:3]} vs {inside}"
  assert not must_run or len(lines) > seen, f"{op}: the spies never ran (the test proves nothing)"
  return len(lines)


def test_planted_tools_never_run_outside(backend, mode, tmp_path):
  with make(backend, mode=mode) as sb:
    planted, n = _plant(sb), 0
    assert planted == (mode == "container"), "the root is read-only in readonly mode"
    if planted:  # the spies work: what an exec runs (inside) logs itself
      sb.exec("cat /dev/null && tar --version && mkdir -p /tmp && rm -f /tmp/none")
      n = _check(sb, "exec", 0, must_run=True)
    sb.write_file("/tmp/a/b.txt", b"hello\n")
    n = _check(sb, "write_file", n)
    assert sb.read_file("/tmp/a/b.txt") == b"hello\n"
    n = _check(sb, "read_file", n)
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.txt").write_text("up\n")
    sb.upload(str(src), "/tmp/up")
    n = _check(sb, "upload", n)
    sb.download("/tmp/up", str(tmp_path / "dl"))
    assert (tmp_path / "dl" / "d" / "f.txt").read_text() == "up\n"
    n = _check(sb, "download", n)
    snap = sb.snapshot()
    n = _check(sb, "snapshot", n)
    sb.write_file("/tmp/a/b.txt", b"changed\n")
    _check(sb, "write_file", n)
    sb.restore(snap)  # container mode on bwrap: a new pid namespace, the log as at `snap`
    assert sb.read_file("/tmp/a/b.txt") == b"hello\n"
    _check(sb, "restore", n)


def test_mounts_after_setup_are_refused(backend, mode):
  """The agent cannot mount (no CAP_SYS_ADMIN; on bwrap the seccomp filter refuses it)."""
  with make(backend, mode=mode) as sb:
    before = sb.exec("cat /proc/self/mountinfo").stdout
    for cmd in ("mount -t tmpfs none /tmp", "mount --bind /tmp /usr/lib", "umount /dev/shm"):
      r = sb.exec(cmd)
      assert r.exit_code != 0, (cmd, r.stdout)
    after = sb.exec("cat /proc/self/mountinfo").stdout
    assert system_guard.mounts(before) == system_guard.mounts(after)


@pytest.mark.parametrize("mode", ["container", "readonly"])
def test_fingerprint_sees_a_mount_after_setup(sandbox_image, mode):
  """Should a mount get through (here: the host makes one in the sandbox's mount namespace),
  the grader's fingerprint names it."""
  with make("bwrap", mode=mode) as sb:
    baseline = sb.system_fingerprint()
    assert baseline and system_guard.changed(baseline, sb.system_fingerprint()) == []
    # The host's python (started before setns) binds /dev/shm over /tmp in the sandbox.
    code = (
      "import ctypes, os, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
      "fd = os.open(f'/proc/{sys.argv[1]}/ns/mnt', os.O_RDONLY)\n"
      "assert libc.setns(fd, 0) == 0 and libc.mount(b'/dev/shm', b'/tmp', None, 4096, None) == 0\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(sb.pid1)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert system_guard.changed(baseline, sb.system_fingerprint()) == ["mount:/tmp"]


def test_io_uring_is_refused_bwrap(sandbox_image, mode):
  """io_uring's requests bypass seccomp; bwrap's filter refuses the calls (EPERM)."""
  probe = (
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "buf = ctypes.create_string_buffer(120)\n"
    "print(libc.syscall(425, 4, buf), ctypes.get_errno())\n"
  )
  with make("bwrap", mode=mode) as sb:
    r = sb.exec("python3 -", stdin=probe)
    assert r.stdout.split() == ["-1", "1"], (r.stdout, r.stderr)
