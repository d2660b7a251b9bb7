"""Exec output is never lost to a race a loaded machine exposes.

Docker:
- A fast exec's output (even its end of stream) can reach this process together with the
  `101 UPGRADED` headers, inside docker-py's buffered HTTP reader: a real daemon with the
  header parse delayed must still give the whole output.
- The daemon copies stdout and stderr separately, so stdout can trail the exit line: the
  demultiplexer is fed frames in that order over a real socket pair.
bubblewrap (pipes read by pipes.pump): what the process wrote before it exited is read even
when the reader wakes after the background-child grace.
"""

from __future__ import annotations

import fcntl
import http.client
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from envs.sandbox import common, docker_stream, pipes, testing

sandbox_image = testing.sandbox_image  # fixture


def _frame(kind: int, data: bytes) -> bytes:
  return struct.pack(">BxxxL", kind, len(data)) + data


def _feed(chunks, gap_s: float, close: bool = True):
  """A socket that receives `chunks` `gap_s` apart (then EOF if `close`), and the writer."""
  ours, theirs = socket.socketpair()

  def write():
    for c in chunks:
      theirs.sendall(c)
      time.sleep(gap_s)
    if close:
      theirs.close()

  t = threading.Thread(target=write, daemon=True)
  t.start()
  return ours, theirs, t


def _pump(chunks, gap_s=0.0, close=True, nonce=b"n0nce"):
  """pump's exit code, stdout and stderr. Its deadline is an hour away: a pump that waited for
  the end of a stream left open would hang here until pytest-timeout fails the test."""
  ours, theirs, t = _feed(chunks, gap_s, close)
  out, err = common.Capped(None), common.Capped(None)
  deadline = time.monotonic() + 3600
  rc = docker_stream.pump(docker_stream.ExecStream(ours, None), out, err, nonce, deadline)
  t.join()
  theirs.close()
  return rc, bytes(out.buf), bytes(err.buf)


def test_stdout_trailing_the_exit_line_is_kept():
  # the exit line first, the output 0.5 s later (five times the background-child grace)
  chunks = [_frame(2, b"warn\nn0nce 0\n"), _frame(1, b"91\n45\n"), _frame(1, b"n0nce.")]
  rc, out, err = _pump(chunks, gap_s=0.5)
  assert (rc, out, err) == (0, b"91\n45\n", b"warn\n")


def test_marker_split_across_frames_and_glued_to_output():
  chunks = [
    _frame(1, b"no newline n0"),
    _frame(1, b"nc"),
    _frame(1, b"e."),
    _frame(2, b"n0nce 3\n"),
  ]
  rc, out, err = _pump(chunks)
  assert (rc, out, err) == (3, b"no newline ", b"")


def test_background_child_holding_the_stream_does_not_block():
  # both markers in, the stream stays open (a `sleep 100 &`): pump returns after the grace
  chunks = [_frame(1, b"started\nn0nce."), _frame(2, b"n0nce 0\n")]
  rc, out, _ = _pump(chunks, close=False)
  assert (rc, out) == (0, b"started\n")


def test_frames_already_buffered_are_read_before_the_socket():
  # frames that docker-py's reader took off the socket come first, then the socket's own
  ours, theirs = socket.socketpair()
  stream = docker_stream.ExecStream(ours, None)
  stream.buf = _frame(1, b"early ") + _frame(1, b"bi")
  theirs.sendall(b"".join([_frame(1, b"rd\nn"), _frame(1, b"."), _frame(2, b"n 0\n")]))
  theirs.close()
  out, err = common.Capped(None), common.Capped(None)
  rc = docker_stream.pump(stream, out, err, b"n", time.monotonic() + 3600)
  assert (rc, bytes(out.buf)) == (0, b"early bird\n")


@pytest.mark.docker
def test_output_that_came_with_the_headers_is_not_lost(monkeypatch, sandbox_image):
  """The exec runs to its end before this process parses the upgrade response (as when the
  machine is loaded): its frames and EOF sit in docker-py's buffered reader."""
  sb = testing.make("docker")
  try:
    begin = http.client.HTTPResponse.begin

    def late_begin(self):
      time.sleep(0.5)  # the daemon answers, runs the exec and closes the stream meanwhile
      return begin(self)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late_begin)
    r = sb.exec("echo 91; echo 45; echo e >&2")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (0, "91\n45\n", "e\n", False), r
    r = sb.exec("head -c 100000 /dev/zero | tr '\\0' x")
    assert r.exit_code == 0 and r.stdout == "x" * 100000, (r.exit_code, len(r.stdout))
  finally:
    monkeypatch.undo()
    sb.close()


def test_pipes_are_drained_after_the_process_exits():
  # The process has written 512 KiB into an enlarged pipe and exited before the reader first
  # wakes (as when this process is descheduled); with no grace the reader stops on its next
  # turn, and must still have read everything.
  code = "import sys, time; time.sleep(0.3); sys.stdout.buffer.write(b'x' * (512 << 10))"
  p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  fcntl.fcntl(p.stdout.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ, before the child writes
  os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped (pump opens a pidfd)
  out, err = common.Capped(None), common.Capped(None)
  sinks = {p.stdout.fileno(): out, p.stderr.fileno(): err}
  timed_out = pipes.pump(p, sinks, None, time.monotonic() + 3600, grace_s=0.0)
  p.wait()
  assert not timed_out and len(out.buf) == 512 << 10 and not err.buf
