"""Isolation of both sandbox backends in both modes: network, host filesystem, root, processes,
identity. The escape classes of container mode (strays, transfers, host disk, seccomp) are in
test_sandbox_container.py."""

from __future__ import annotations

import os
import pathlib
import socket
import threading
import uuid

from envs.sandbox import testing
from envs.sandbox.testing import host_ip, make

backend, mode, sandbox_image = testing.backend, testing.mode, testing.sandbox_image  # fixtures

REPO = pathlib.Path(__file__).resolve().parents[1]


class _Server:
  """A TCP server on the host's loopback that counts connections."""

  def __init__(self, host: str = "127.0.0.1"):
    self.sock = socket.socket()
    self.sock.bind((host, 0))
    self.sock.listen(16)
    self.sock.settimeout(0.2)
    self.port, self.accepted, self._stop = self.sock.getsockname()[1], 0, False
    self._t = threading.Thread(target=self._loop, daemon=True)
    self._t.start()

  def _loop(self):
    while not self._stop:
      try:
        conn, _ = self.sock.accept()
      except (TimeoutError, OSError):
        continue
      self.accepted += 1
      conn.close()

  def close(self):
    self._stop = True
    self._t.join()
    self.sock.close()


_CONNECT = """
import socket, sys
for host in sys.argv[2:]:
  s = socket.socket(); s.settimeout(3)
  try:
    s.connect((host, int(sys.argv[1]))); print(host, "CONNECTED")
  except OSError as e:
    print(host, "refused" if isinstance(e, ConnectionRefusedError) else type(e).__name__)
"""


# Waits (up to 30 s) for the sandbox-local server instead of sleeping a fixed time.
_LOCAL_GET = (
  "import time, urllib.request as u\n"
  "end = time.time() + 30\n"
  "while True:\n"
  "  try:\n"
  "    print(u.urlopen('http://127.0.0.1:8765/').status); break\n"
  "  except OSError:\n"
  "    if time.time() > end: raise\n"
  "    time.sleep(0.05)\n"
)


def test_no_network(backend, mode):
  srv = _Server()
  try:
    with make(backend, mode=mode) as sb:
      targets = ["127.0.0.1"] + ([ip] if (ip := host_ip()) else [])
      r = sb.exec(f"python3 -c '{_CONNECT}' {srv.port} {' '.join(targets)}", timeout_s=60)
      assert r.exit_code == 0, r
      assert "CONNECTED" not in r.stdout, r.stdout
      assert len(r.stdout.splitlines()) == len(targets)
      ifaces = sb.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").stdout.split()
      assert ifaces == ["lo"]
      # Its own loopback works (a sandbox-local server is fine), the host's is another one.
      sb.write_file("/tmp/get.py", _LOCAL_GET)
      own = sb.exec(
        "python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 & python3 /tmp/get.py",
        timeout_s=60,
      )
      assert own.stdout.strip() == "200", own
    assert srv.accepted == 0
  finally:
    srv.close()


def test_host_filesystem_and_other_workspaces_invisible(backend, mode, tmp_path):
  secret = tmp_path / f"secret-{uuid.uuid4().hex}"
  secret.write_text("host secret")
  marker = f"ws-marker-{uuid.uuid4().hex}"
  with make(backend, mode=mode) as a, make(backend, mode=mode) as b:
    a.write_file(marker, "a's workspace")
    assert a.exec(f"test -f {marker}").exit_code == 0
    for path in (str(secret), str(tmp_path), str(REPO), str(REPO / "envs" / "sandbox")):
      r = b.exec(f"test -e {path}")
      assert r.exit_code != 0, f"{path} is visible in the sandbox"
    r = b.exec(f"find / -path /proc -prune -o -name '{marker}' -print 2>/dev/null", timeout_s=120)
    assert r.stdout.strip() == ""
    r = b.exec(f"grep -rs 'host secret' /tmp /workspace /home /etc; ls -A {b.spec.workdir}")
    assert r.stdout.strip() == ""


def test_root_filesystem_is_read_only(backend):
  with make(backend, mode="readonly") as sb:
    for path in ("/x", "/etc/passwd", "/usr/bin/python3", "/home/x"):
      r = sb.exec(f"echo pwned >> {path}")
      assert r.exit_code != 0, path
      assert "Read-only file system" in r.stderr or "Permission denied" in r.stderr, r
    r = sb.exec("touch /usr/local/x /etc/x /var/x 2>&1; echo done")
    assert r.stdout.count("Read-only file system") == 3, r.stdout
    r = sb.exec("echo ok > ws.txt && echo ok > /tmp/t.txt && echo ok > ~/h.txt && cat ws.txt")
    assert r.exit_code == 0 and r.stdout == "ok\n", r


def test_host_processes_invisible(backend, mode):
  with make(backend, mode=mode) as sb:
    r = sb.exec("ps -e -o pid=,comm=")
    assert r.exit_code == 0, r
    comms = {ln.split()[1] for ln in r.stdout.splitlines()}
    assert comms <= {"bash", "sleep", "ps", "sh", "timeout"}, comms
    pids = [int(ln.split()[0]) for ln in r.stdout.splitlines()]
    assert 1 in pids and max(pids) < 1000
    # A host process cannot be signalled either.
    r = sb.exec(f"kill -0 {os.getpid()} 2>&1; echo rc=$?")
    assert "rc=1" in r.stdout


def test_identity_is_unprivileged(backend):
  with make(backend, mode="readonly") as sb:
    r = sb.exec("id -u; id -g; grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status; echo $HOME")
    lines = r.stdout.split()
    assert lines[0] == "1000" and lines[1] == "1000", r.stdout
    caps = dict(zip(lines[2:10:2], lines[3:10:2], strict=True))
    assert caps["CapEff:"] == caps["CapPrm:"] == caps["CapAmb:"] == "0000000000000000", caps
    assert lines[-1] == "/home/agent"
    r = sb.exec("unshare -U true 2>&1; echo rc=$?")  # no nested user namespaces
    assert "rc=0" not in r.stdout, r.stdout
    assert sb.exec("kill -9 1; sleep 0.2; echo alive").stdout == "alive\n"  # pid 1 is immune
    # Killing everything else, pid 1's helpers (sleep, date) included, does not end it either.
    kill_all = "for i in 1 2 3 4 5 6; do for p in /proc/[0-9]*; do p=${p#/proc/}; " \
      "[ $p = 1 ] || [ $p = $$ ] || kill -9 $p 2>/dev/null; done; sleep 0.1; done; echo done"  # fmt: skip
    assert sb.exec(kill_all, timeout_s=60).stdout == "done\n"
    assert sb.exec("echo alive").stdout == "alive\n" and sb.alive


def test_image_has_task_tools(backend):
  tools = "python python3 pytest git make jq sqlite3 file bc patch less diff gawk tar xz"
  with make(backend) as sb:
    r = sb.exec(f"for t in {tools}; do command -v $t >/dev/null || echo missing $t; done")
    assert r.exit_code == 0 and r.stdout == "", r
    r = sb.exec("python --version && python3 -m pytest --version && git --version")
    assert r.exit_code == 0 and "Python 3" in r.stdout, r


def test_network_is_opt_in_bwrap(sandbox_image):
  """network=True shares the host's network (bubblewrap); Docker would get its bridge."""
  srv = _Server()
  try:
    with make("bwrap", network=True) as sb:
      r = sb.exec(f"python3 -c '{_CONNECT}' {srv.port} 127.0.0.1", timeout_s=60)
      assert "127.0.0.1 CONNECTED" in r.stdout, r
    assert srv.accepted == 1
  finally:
    srv.close()
