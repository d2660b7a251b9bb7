"""The agent's services: which sandbox processes survive the cleanup before the tests.

Terminal-Bench's harness runs the hidden tests in the same container right after the agent,
with its background processes still running: a reference solution may start `nginx` or
`sshd` and exit, and the tests then connect to them. With `keep_services`, the verifier keeps
exactly the processes that hold a listening socket (TCP/TCP6 in LISTEN, UDP bound and not
connected, UNIX stream/seqpacket in LISTEN: the /proc/net tables' inodes matched against the
processes' `socket:[inode]` descriptors) and their descendants (a server's workers that do
not hold the socket themselves, such as PostgreSQL's); every other process is killed. Not its
ancestors: a parent that only waited for the server (the agent's shell, a restart loop) is
the agent's process, and the server runs on without it. Threads come along (a kill is per
process).

`find` computes the set once, host-side, from the host's /proc (no program of the sandbox
runs), for both backends; `kill_script` is the in-sandbox backstop, sparing the same set by
its pids in the sandbox's pid namespace.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping

NET_TABLES = ("tcp", "tcp6", "udp", "udp6", "unix")
_TCP_LISTEN, _UDP_UNCONNECTED = "0A", "07"
_UNIX_ACCEPTCON = 0x10000  # __SO_ACCEPTCON: a listening UNIX socket
_UNIX_STREAM, _UNIX_SEQPACKET = 1, 5
_SOCKET = re.compile(r"socket:\[(\d+)\]")


@dataclasses.dataclass(frozen=True)
class Service:
  """A process kept alive through grading: its host pid, its pid in the sandbox, its name."""

  host_pid: int
  pid: int
  comm: str


@dataclasses.dataclass(frozen=True)
class Proc:
  ppid: int
  comm: str
  sockets: frozenset[int]  # inodes of its socket descriptors


def listening_inodes(tables: Mapping[str, str]) -> set[int]:
  """Inodes of the listening sockets in /proc/net's tables (`tcp`, `tcp6`, `udp`, `udp6`,
  `unix` -> the file's text); a table left out or a malformed line is skipped."""
  out = set()
  for name, text in tables.items():
    for line in text.splitlines()[1:]:
      f = line.split()
      try:
        if name == "unix":  # Num RefCount Protocol Flags Type St Inode [Path]
          listening = int(f[3], 16) & _UNIX_ACCEPTCON and int(f[4], 16) in (
            _UNIX_STREAM,
            _UNIX_SEQPACKET,
          )
          inode = int(f[6])
        else:  # sl local rem st tx:rx tr:when retrnsmt uid timeout inode
          want = _TCP_LISTEN if name.startswith("tcp") else _UDP_UNCONNECTED
          listening = f[3] == want and not f[1].endswith(":0000")
          inode = int(f[9])
      except (IndexError, ValueError):
        continue
      if listening and inode:
        out.add(inode)
  return out


def survivors(procs: Mapping[int, Proc], listening: set[int]) -> set[int]:
  """The pids of `procs` that hold a listening socket, and their descendants among `procs`."""
  keep = {pid for pid, p in procs.items() if p.sockets & listening}
  children: dict[int, list[int]] = {}
  for pid, p in procs.items():
    children.setdefault(p.ppid, []).append(pid)
  todo = list(keep)
  while todo:
    for child in children.get(todo.pop(), ()):
      if child not in keep:
        keep.add(child)
        todo.append(child)
  return keep


def _read(path: str) -> str | None:
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      return f.read()
  except OSError:
    return None


def _stat(proc: str, pid: int) -> tuple[int, int, str] | None:
  """(ppid, session, name); the name is cut at the stat line's LAST ')' (it may hold any)."""
  raw = _read(f"{proc}/{pid}/stat")
  if raw is None or ")" not in raw:
    return None
  head, tail = raw.rsplit(")", 1)
  f = tail.split()
  return int(f[1]), int(f[3]), head.split("(", 1)[-1]


def _ns_pids(proc: str, pid: int) -> list[int]:
  for line in (_read(f"{proc}/{pid}/status") or "").splitlines():
    if line.startswith("NSpid:"):
      return [int(x) for x in line.split()[1:]]
  return []


def _sockets(proc: str, pid: int) -> frozenset[int]:
  out = set()
  try:
    names = os.listdir(f"{proc}/{pid}/fd")
  except OSError:
    return frozenset()
  for n in names:
    try:
      m = _SOCKET.fullmatch(os.readlink(f"{proc}/{pid}/fd/{n}"))
    except OSError:
      continue
    if m:
      out.add(int(m.group(1)))
  return frozenset(out)


def find(pid1: int, proc: str = "/proc") -> tuple[Service, ...]:
  """The services of the sandbox whose init is host pid `pid1`: every process of its pid
  namespace (but pid 1's session: the sandbox's own helpers) that `survivors` keeps, read from
  the host's /proc. () when the host cannot see the sandbox's processes."""
  try:
    ns = os.readlink(f"{proc}/{pid1}/ns/pid")
    init = _stat(proc, pid1)
  except OSError:
    return ()
  level = len(_ns_pids(proc, pid1)) - 1
  if init is None or level < 0:
    return ()
  procs, pids, listening, nets = {}, {}, set(), set()
  for name in os.listdir(proc):
    if not name.isdigit() or int(name) == pid1:
      continue
    pid = int(name)
    try:
      if os.readlink(f"{proc}/{pid}/ns/pid") != ns:
        continue
      net = os.readlink(f"{proc}/{pid}/ns/net")
    except OSError:
      continue
    st, nspid = _stat(proc, pid), _ns_pids(proc, pid)
    if st is None or len(nspid) <= level or st[1] == init[1]:
      continue
    procs[pid], pids[pid] = Proc(st[0], st[2], _sockets(proc, pid)), nspid[level]
    if net not in nets:  # each network namespace's tables once
      nets.add(net)
      tables = {t: _read(f"{proc}/{pid}/net/{t}") or "" for t in NET_TABLES}
      listening |= listening_inodes(tables)
  keep = survivors(procs, listening)
  return tuple(Service(p, pids[p], procs[p].comm) for p in sorted(keep))


def names(kept: Iterable[Service], limit: int = 8) -> str:
  """`nginx,sshd`: the kept processes' names, each once, sorted (for a result's flags)."""
  uniq = sorted({re.sub(r"[^\w.+-]", "_", s.comm) or "_" for s in kept})
  return ",".join(uniq[:limit]) + (f"(+{len(uniq) - limit})" if len(uniq) > limit else "")


# Kills every process in the sandbox except this shell's ancestors, the `keep` pids and the
# session of pid 1 (the sandbox's init and its helpers: killing the helper init forks could
# end the sandbox; no process of an exec can join that session), so nothing the agent left
# running (a daemon rewriting files) survives into grading. Builtins only (no fork per
# process); loops because a process may fork while we walk /proc. Each stat file is read whole
# (`read -d ''`) and cut after its LAST ") ": the process name is printed raw and may hold ")"
# and newlines, so a line-wise read would let a process named ") S 0 1 1\n" fake its session.
_KILL = r"""
__anc=" $$ @KEEP@"; __p=$$
while [ "$__p" -gt 1 ] 2>/dev/null; do
  __s=; read -r -d '' __s 2>/dev/null < /proc/$__p/stat; [ -n "$__s" ] || break
  __s=${__s##*) }; set -- $__s; __p=$2; __anc="$__anc$__p "
done
for __i in 1 2 3; do
  for __d in /proc/[0-9]*; do
    __pid=${__d#/proc/}
    case "$__anc" in *" $__pid "*) continue;; esac
    __s=; read -r -d '' __s 2>/dev/null < $__d/stat; [ -n "$__s" ] || continue
    __s=${__s##*) }; set -- $__s
    [ "$4" = 1 ] || kill -9 "$__pid" 2>/dev/null
  done
done
set --; unset __anc __p __s __i __d __pid
"""


def kill_script(keep: Iterable[Service] = ()) -> str:
  """The in-sandbox backstop (bash): kills every process but `keep` (by their sandbox pids)."""
  return _KILL.replace("@KEEP@", "".join(f"{int(s.pid)} " for s in keep))
