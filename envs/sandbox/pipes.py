"""Reading a host-side child's pipes (a bubblewrap exec): stdin fed, output capped, a grace
for background children that keep a pipe open, and nothing lost that was written before exit."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

from envs.sandbox.base import SandboxError
from envs.sandbox.common import Capped, check_transfer


def pump(
  proc: subprocess.Popen,
  sinks: dict[int, Capped],
  stdin: bytes | None,
  deadline: float,
  grace_s: float = 0.1,
  stop: Capped | None = None,
) -> bool:
  """Feeds `stdin`, reads the fds in `sinks` until EOF (or `grace_s` after the process exits:
  a background child may hold a pipe open) or `deadline`, or until `stop` overflows its cap.
  True if the deadline was hit."""
  sel = selectors.DefaultSelector()
  for fd in sinks:
    os.set_blocking(fd, False)
    sel.register(fd, selectors.EVENT_READ)
  pidfd = os.pidfd_open(proc.pid)
  sel.register(pidfd, selectors.EVENT_READ)
  view, win = memoryview(stdin or b""), None
  if stdin is not None and proc.stdin is not None:
    win = proc.stdin.fileno()
    os.set_blocking(win, False)
    sel.register(win, selectors.EVENT_WRITE) if view else proc.stdin.close()
  exited_at, readers = None, len(sinks)
  try:
    while readers:
      now = time.monotonic()
      end = deadline if exited_at is None else min(deadline, exited_at + grace_s)
      if now >= end:
        if exited_at is not None:  # what it wrote before it exited, however late we woke
          _drain(sel, sinks, win)
        return now >= deadline
      for key, _ in sel.select(end - now):
        fd = key.fd
        if fd == pidfd:
          exited_at = time.monotonic()
          sel.unregister(pidfd)
        elif fd == win:
          try:
            view = view[os.write(win, view[: 1 << 16]) :]
          except BrokenPipeError:
            view = view[:0]
          if not view:
            sel.unregister(win)
            proc.stdin.close()
            win = None
        else:
          data = os.read(fd, 1 << 16)
          if data:
            sinks[fd].add(data)
            if stop is not None and stop.dropped:
              return False
          else:
            sel.unregister(fd)
            readers -= 1
    return False
  finally:
    os.close(pidfd)
    sel.close()
    if win is not None:
      proc.stdin.close()


def _drain(sel, sinks: dict[int, Capped], *skip) -> None:
  """Reads what the pipes in `sel` hold now (a background child may still be writing: at most
  16 reads each)."""
  for key in list(sel.get_map().values()):
    if key.fd in skip:
      continue
    for _ in range(16):
      try:
        data = os.read(key.fd, 1 << 16)
      except BlockingIOError:
        break
      if not data:
        break
      sinks[key.fd].add(data)


def run_capped(argv, sink, cap: int, timeout_s: float, pass_fds=()) -> tuple[int, str]:
  """Runs a host-side command whose stdout goes to `sink`, at most `cap` bytes (else
  TransferLimitError); returns (exit status, stderr)."""
  p = subprocess.Popen(
    argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=pass_fds,
    stdin=subprocess.DEVNULL, start_new_session=True,
  )  # fmt: skip
  out, err = Capped(cap, sink=sink), Capped(1 << 20)
  try:
    hit = pump(p, {p.stdout.fileno(): out, p.stderr.fileno(): err}, None,
               time.monotonic() + timeout_s, stop=out)  # fmt: skip
    if not hit and not out.dropped:
      try:
        p.wait(timeout=timeout_s)
      except subprocess.TimeoutExpired:
        hit = True
  finally:
    if p.poll() is None:
      os.killpg(p.pid, signal.SIGKILL)
    rc = p.wait()
    p.stdout.close()
    p.stderr.close()
  check_transfer(out, cap, argv[:2])
  if hit:
    raise SandboxError(f"{argv[:2]} timed out")
  return rc, err.buf.decode(errors="replace")
