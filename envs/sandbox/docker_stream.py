"""The output stream of a Docker exec: a hijacked socket carrying 8-byte-framed stdout/stderr.

Two things make reading it by hand necessary (docker-py's own reader blocks, has no deadline
and cannot send stdin while reading):
- docker-py parses the `101 UPGRADED` headers through a buffered reader, which can read past
  them: when the exec ran before this process got to the headers (a loaded machine), part or
  all of its output, even the end of stream, is in that buffer and never reaches the raw
  socket. `ExecStream` takes it from there first.
- the daemon copies the container's stdout and stderr pipes separately, so their frames may
  arrive in either order. The exec wrapper ends with a nonce marker on stdout and then the
  nonce-tagged exit line on stderr; `pump` waits for both before it stops listening to
  background children that keep the stream open.
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
import time

# Appended to the sandboxed command: $1 is the nonce. stdout's marker first, then the exit line.
WRAP_TAIL = 'rc=$?; printf "%s." "$1"; printf "%s %d\\n" "$1" "$rc" >&2'
_GRACE_S = 0.1  # how long background children may still write after both markers
_ORDER_S = 10.0  # how long stdout's marker may trail the exit line (daemon scheduling only)


def buffered_tail(sock) -> bytes:
  """What docker-py's HTTP reader read past the headers of `sock`'s response, consumed."""
  fp = getattr(
    getattr(getattr(getattr(sock, "_response", None), "raw", None), "_fp", None), "fp", None
  )
  if fp is None or not hasattr(fp, "peek"):
    return b""
  try:
    data = fp.peek(1 << 16)  # the raw socket is non-blocking: no read past the buffer blocks
  except (BlockingIOError, OSError, ValueError):
    return b""
  return fp.read(len(data)) if data else b""


class ExecStream:
  """Demultiplexes a hijacked exec socket (docker-py's `exec_start(socket=True)`) while a
  thread sends stdin."""

  def __init__(self, sock, stdin):
    self.sock = getattr(sock, "_sock", sock)
    self.sock.setblocking(False)
    self.buf = buffered_tail(sock)
    self.sender = None
    if stdin is not None:
      self.sender = threading.Thread(target=self._send, args=(stdin,), daemon=True)
      self.sender.start()

  def _send(self, data) -> None:
    try:
      self.sock.setblocking(True)  # only this thread blocks; reads use select
      if isinstance(data, bytes | bytearray):
        self.sock.sendall(data)
      else:
        while chunk := data.read(1 << 16):
          self.sock.sendall(chunk)
      self.sock.shutdown(socket.SHUT_WR)
    except OSError:
      pass  # the process exited without reading everything

  def _has_frame(self) -> bool:
    return len(self.buf) >= 8 and len(self.buf) >= 8 + struct.unpack(">BxxxL", self.buf[:8])[1]

  def frames(self, timeout_s: float):
    """Yields (stream, bytes) until EOF or `timeout_s`; yields (None, b'') on a timeout."""
    if not self._has_frame():
      sel = selectors.DefaultSelector()
      sel.register(self.sock, selectors.EVENT_READ)
      try:
        if not sel.select(max(0.0, timeout_s)):
          yield None, b""
          return
      finally:
        sel.close()
      try:
        data = self.sock.recv(1 << 16)
      except (BlockingIOError, InterruptedError):
        return
      if not data:
        raise EOFError
      self.buf += data
    while self._has_frame():
      kind, size = struct.unpack(">BxxxL", self.buf[:8])
      frame, self.buf = self.buf[8 : 8 + size], self.buf[8 + size :]
      yield kind, frame

  def close(self) -> None:
    try:
      self.sock.close()
    except OSError:
      pass


class _Marked:
  """Passes a stream through to `sink` (a Capped) but for the first `marker`, which it
  removes; holds back only the bytes that could be the start of one."""

  def __init__(self, sink, marker: bytes):
    self.sink, self.marker, self.held, self.seen = sink, marker, b"", False

  def add(self, data: bytes) -> None:
    if self.seen:
      self.sink.add(data)
      return
    self.held += data
    i = self.held.find(self.marker)
    if i >= 0:
      self.seen = True
      self.sink.add(self.held[:i] + self.held[i + len(self.marker) :])
      self.held = b""
      return
    keep = len(self.marker) - 1
    if len(self.held) > keep:
      self.sink.add(self.held[:-keep])
      self.held = self.held[-keep:]

  def flush(self) -> None:
    self.sink.add(self.held)
    self.held = b""


def pump(stream: ExecStream, out, err, nonce: bytes, deadline: float) -> int | None:
  """Reads an exec wrapped with WRAP_TAIL until EOF or shortly after both markers; returns
  the exit code, None on a timeout. `out`/`err` get the command's stdout/stderr."""
  rc, tail, marked = None, b"", _Marked(out, nonce + b".")
  t_rc = t_both = None  # when the exit line came; when both markers had come
  try:
    while True:
      now, end = time.monotonic(), deadline
      if rc is not None:
        t_rc = now if t_rc is None else t_rc
        if marked.seen:
          t_both = now if t_both is None else t_both
          end = min(end, t_both + _GRACE_S)
        else:
          end = min(end, t_rc + _ORDER_S)
      if now >= end:
        return rc
      for kind, data in stream.frames(end - time.monotonic()):
        if kind == 1:
          marked.add(data)
        elif kind == 2:
          tail = (tail + data)[-256:]
          i = tail.find(nonce + b" ")
          if rc is None and i >= 0 and tail.endswith(b"\n"):
            rc = int(tail[i + len(nonce) + 1 :].split(b"\n", 1)[0])
            data = data[: max(0, len(data) - (len(tail) - i))]
          err.add(data)
  except EOFError:
    return rc
  finally:
    marked.flush()
    stream.close()
