"""Package-only egress (`SandboxSpec(network="packages")`): an allow-list forwarding proxy.

Each packages-mode sandbox keeps its own network namespace with only loopback (bwrap's
--unshare-net, Docker's network "none"), so it has no route anywhere. The host then opens a
listening socket *inside* that namespace (`listen_in_netns`: a helper enters it, binds
127.0.0.1:PROXY_PORT there and hands the socket back over SCM_RIGHTS) and serves it from
this process: the sandbox reaches the proxy on its own loopback, no process of the sandbox
relays anything (so the agent cannot kill or replace the relay), and every connection the
proxy makes leaves from the host. The proxy answers HTTP CONNECT (https) and plain-HTTP
forward requests whose host:port is one of the machine's configured package sources
(egress_sources.py) and refuses every other destination with a 403, logged and kept in
`refused`. Local (file://) sources are not routed at all: the backends bind them read-only.

Hand-written: the standard library has no forward proxy, and the proxy packages (proxy.py,
mitmproxy) bring a plugin framework, their own process model and TLS interception for what is
here one request head read, one allow-list check and a byte relay.
"""

from __future__ import annotations

import logging
import selectors
import socket
import subprocess
import sys
import threading
import urllib.parse

from envs.sandbox import common, egress_sources
from envs.sandbox.base import SandboxError

_LOG = logging.getLogger(__name__)
_HEAD_MAX = 65536  # bytes of a request head at most
_CONNECT_TIMEOUT_S = 30.0
_IDLE_TIMEOUT_S = 300.0  # a relay with no traffic either way for this long is closed
_HOP_HEADERS = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")
# Run by the helper inside the sandbox's network namespace (host Python, host filesystem).
_BIND = (
  "import socket,sys\n"
  "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
  "s.bind(('127.0.0.1',int(sys.argv[1]))); s.listen(128)\n"
  "socket.send_fds(socket.socket(fileno=int(sys.argv[2])),[b'x'],[s.fileno()])\n"
)


def listen_in_netns(pid: int, userns: bool) -> socket.socket:
  """A socket listening on 127.0.0.1:PROXY_PORT of process `pid`'s network namespace
  (`userns`: enter its user namespace too, when that one owns the network namespace)."""
  parent, child = socket.socketpair()
  with parent, child:
    argv = ["nsenter", "-t", str(pid), "-n"] + (["-U", "--preserve-credentials"] if userns else [])
    argv += ["--", sys.executable, "-S", "-c", _BIND, str(egress_sources.PROXY_PORT)]
    argv.append(str(child.fileno()))
    p = subprocess.run(
      argv, pass_fds=(child.fileno(),), capture_output=True, timeout=60, env={"PATH": common.PATH}
    )
    if p.returncode != 0:
      err = p.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
      raise SandboxError(f"package egress: no proxy socket in the sandbox (pid {pid}): {err[0]}")
    _, fds, _, _ = socket.recv_fds(parent, 1, 1)
  return socket.socket(fileno=fds[0])


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
  """The request head (through the blank line) and whatever followed it."""
  data = b""
  while b"\r\n\r\n" not in data:
    chunk = conn.recv(8192)
    if not chunk or len(data) > _HEAD_MAX:
      raise ValueError("incomplete or oversized request head")
    data += chunk
  head, _, rest = data.partition(b"\r\n\r\n")
  return head, rest


def _target(method: str, target: str) -> tuple[str, int, str]:
  """(host, port, origin-form path) of a CONNECT authority or an absolute http:// URL."""
  if method == "CONNECT":
    host, _, port = target.rpartition(":")
    return host.strip("[]").lower(), int(port), ""
  u = urllib.parse.urlsplit(target)
  if u.scheme.lower() != "http" or not u.hostname:
    raise ValueError(f"not a proxy request: {target[:80]!r}")
  path = (u.path or "/") + (f"?{u.query}" if u.query else "")
  return u.hostname.lower(), u.port or 80, path


def _origin_head(lines: list[bytes], method: str, path: str, version: str) -> bytes:
  """The request head for the origin server: origin-form target, hop-by-hop headers gone,
  one request per connection (a kept-alive connection could be reused for another host)."""
  keep = [ln for ln in lines[1:] if ln.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS]
  first = f"{method} {path} {version}".encode()
  return b"\r\n".join([first, *keep, b"Connection: close"]) + b"\r\n\r\n"


def _relay(a: socket.socket, b: socket.socket) -> None:
  """Copies bytes both ways until both sides have closed (or nothing moves for a while)."""
  sel = selectors.DefaultSelector()
  peers = {a: b, b: a}
  for s in peers:
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
  try:
    while sel.get_map():
      events = sel.select(_IDLE_TIMEOUT_S)
      if not events:
        return
      for key, _ in events:
        src = key.fileobj
        try:
          data = src.recv(65536)
        except BlockingIOError:
          continue
        if data:
          peers[src].setblocking(True)
          peers[src].sendall(data)
          peers[src].setblocking(False)
        else:
          sel.unregister(src)
          try:
            peers[src].shutdown(socket.SHUT_WR)
          except OSError:
            pass
  except OSError:  # a reset side ends the relay
    return
  finally:
    sel.close()


class EgressProxy:
  """The allow-list proxy of one sandbox (`name`), serving the sockets given to `attach`."""

  def __init__(self, sources: egress_sources.PackageSources, name: str):
    self.sources, self.name = sources, name
    self.allowed = sources.endpoints()
    self.refused: list[str] = []  # "METHOD host:port" of every refused request, in order
    self._lock = threading.Lock()
    self._listeners: list[socket.socket] = []
    self._conns: set[socket.socket] = set()
    self._closed = False

  def attach(self, pid: int, userns: bool = False) -> None:
    """Serves a new listener in `pid`'s network namespace (replacing any earlier one: a
    restarted sandbox has new namespaces)."""
    sock = listen_in_netns(pid, userns)
    with self._lock:
      old, self._listeners = self._listeners, [sock]
    for s in old:
      _shut(s)
    threading.Thread(
      target=self._accept, args=(sock,), name=f"egress-{self.name}", daemon=True
    ).start()

  def env(self) -> dict[str, str]:
    return self.sources.sandbox_env()

  def _accept(self, listener: socket.socket) -> None:
    while True:
      try:
        conn, _ = listener.accept()
      except OSError:  # shut down by attach() or close()
        return
      with self._lock:
        if self._closed:
          conn.close()
          return
        self._conns.add(conn)
      threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

  def _handle(self, conn: socket.socket) -> None:
    upstream = None
    try:
      conn.settimeout(_CONNECT_TIMEOUT_S)
      head, rest = _read_head(conn)
      lines = head.split(b"\r\n")
      method, target, version = lines[0].decode("latin-1").split(" ", 2)
      host, port, path = _target(method.upper(), target)
      if (host, port) not in self.allowed:
        self._refuse(conn, method, host, port)
        return
      try:
        upstream = socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S)
      except OSError as e:
        conn.sendall(_reply(502, f"cannot reach {host}:{port}: {e}"))
        return
      if method.upper() == "CONNECT":
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        first = rest
      else:
        first = _origin_head(lines, method, path, version) + rest
      upstream.sendall(first)
      _relay(conn, upstream)
    except (OSError, ValueError, UnicodeError) as e:
      try:
        conn.sendall(_reply(400, f"bad proxy request: {e}"))
      except OSError:
        pass
    finally:
      for s in (conn, upstream):
        if s is not None:
          s.close()
      with self._lock:
        self._conns.discard(conn)

  def _refuse(self, conn: socket.socket, method: str, host: str, port: int) -> None:
    what = f"{method} {host}:{port}"
    with self._lock:
      self.refused.append(what)
    _LOG.warning("sandbox %s: package egress refused %s (not a package source)", self.name, what)
    conn.sendall(_reply(403, f"agentrl package egress: {host}:{port} is not a package source"))

  def close(self) -> None:
    with self._lock:
      self._closed = True
      socks, self._listeners = self._listeners, []
      socks += list(self._conns)
    for s in socks:
      _shut(s)


def _reply(code: int, text: str) -> bytes:
  reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[code]
  body = (text + "\n").encode()
  head = f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}"
  return head.encode() + b"\r\nConnection: close\r\n\r\n" + body


def _shut(s: socket.socket) -> None:
  """Wakes a thread blocked on `s` (close alone does not wake accept) and closes it."""
  try:
    s.shutdown(socket.SHUT_RDWR)
  except OSError:
    pass
  s.close()


def for_spec(spec, name: str) -> EgressProxy | None:
  """The proxy of a sandbox of `spec` (None unless network="packages")."""
  return EgressProxy(egress_sources.current(), name) if spec.network == "packages" else None
