"""Test support for sandboxes: the image fixture, the backend parameter, and leak probes.

Import the fixtures into a test module (`from envs.sandbox.testing import backend,
sandbox_image  # noqa: F401`). The image is built by CI before the tests
(`python -m launch.build_image`); if it is missing the fixture builds it (minutes, once).
Docker cases skip only when no daemon answers, with the reason, and never under CI=true: there
a missing daemon fails them (CI installs and starts one).
"""

from __future__ import annotations

import functools
import os
import pathlib
import signal
import socket
import threading

import pytest

from envs import sandbox as sandbox_lib
from envs.sandbox import cgroups, common
from envs.sandbox import image as image_lib
from envs.sandbox.base import SandboxError

BACKENDS = ("bwrap", "docker")
MODES = ("container", "readonly")


@functools.cache
def docker_unavailable() -> str | None:
  """None when a Docker daemon answers, else why not."""
  try:
    from envs.sandbox import docker_backend  # noqa: PLC0415

    docker_backend.client()
    return None
  except SandboxError as e:  # its message names the cause ("no reachable Docker daemon: ...")
    return str(e)
  except Exception as e:  # noqa: BLE001 (e.g. no `docker` package)
    return f"no reachable Docker daemon: {e}"


_BUILD_LOCK = threading.Lock()


@pytest.fixture(scope="session")
def sandbox_image() -> image_lib.Image:
  with _BUILD_LOCK:
    return image_lib.build()


def backend_params(names=BACKENDS) -> list:
  """Parameters with the `docker` mark on Docker cases (`pytest -m "not docker"`)."""
  return [pytest.param(n, marks=pytest.mark.docker) if "docker" in n else n for n in names]


def under_ci() -> bool:
  """CI=true: what the suite needs is installed, so nothing may skip for lack of it."""
  return os.environ.get("CI", "").lower() == "true"


def missing(why: str) -> None:
  """The one rule for a component a test needs and the machine lacks: skip, with the reason,
  off CI; fail under CI=true (`.ci/run` sets it, and installs every component)."""
  if under_ci():
    pytest.fail(f"CI=true but {why}")
  pytest.skip(why)


def require_docker() -> None:
  """Skips without a Docker daemon; under CI=true fails instead (CI must have one)."""
  if why := docker_unavailable():
    missing(why)


@pytest.fixture(params=backend_params())
def backend(request, sandbox_image) -> str:
  if request.param == "docker":
    require_docker()
  return request.param


@pytest.fixture(params=MODES)
def mode(request) -> str:
  """Both sandbox modes (SandboxSpec.mode)."""
  return request.param


def make(backend: str, **spec_fields) -> sandbox_lib.Sandbox:
  return sandbox_lib.make(backend, sandbox_lib.SandboxSpec(**spec_fields))


# --- leak probes ------------------------------------------------------------------------------


def descendants(root: int) -> set[int]:
  """Every process below `root` (its whole tree, read from /proc)."""
  kids: dict[int, list[int]] = {}
  for d in pathlib.Path("/proc").iterdir():
    if d.name.isdigit():
      try:
        ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
      except (OSError, IndexError):
        continue
      kids.setdefault(ppid, []).append(int(d.name))
  out, todo = set(), [root]
  while todo:
    for k in kids.get(todo.pop(), []):
      if k not in out:
        out.add(k)
        todo.append(k)
  return out


def kill_own_bwraps(limit: int | None = None) -> list[int]:
  """SIGKILLs bwrap processes this process started (a sandbox dying under the host loop)."""
  killed = []
  for pid in sorted(descendants(os.getpid())):
    if limit is not None and len(killed) >= limit:
      break
    try:
      if b"bwrap" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes():
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    except OSError:
      pass
  return killed


def _in_our_cgroups(tag: str) -> set[int]:
  out = set()
  for d in pathlib.Path("/proc").iterdir():
    if d.name.isdigit():
      try:
        if f"/{tag}-" in (d / "cgroup").read_text():
          out.add(int(d.name))
      except OSError:
        pass
  return out


def _our_uid_sockets() -> int:
  inodes = set()
  for fd in pathlib.Path("/proc/self/fd").iterdir():
    try:
      link = os.readlink(fd)
    except OSError:
      continue
    if link.startswith("socket:["):
      inodes.add(link[8:-1])
  lines = pathlib.Path("/proc/net/unix").read_text().splitlines()[1:]
  return sum(1 for ln in lines if "@agentrl-uidrange-" in ln and ln.split()[6] in inodes)


def leak_probe() -> dict[str, object]:
  """What this process's sandboxes could leave behind on the host, right now."""
  tag = common.owner_tag()
  me = os.getpid()
  threads = {int(t.name) for t in pathlib.Path("/proc/self/task").iterdir()}
  procs = (descendants(me) | _in_our_cgroups(tag)) - threads - {me}
  support = cgroups.detect()
  parents = [p for _, p in support.v1_parents] + (
    [support.track_parent] if support.track_parent else []
  )
  cg = sorted(str(d) for p in parents for d in p.glob(f"{tag}-*"))
  run = sorted(str(d) for d in common.runtime_root().glob(f"{tag}-*"))
  # Only mounts under this process's sandbox names (overlay roots attached at mount_dir()/NAME):
  # the mount table is the whole host's, and other processes' sandboxes come and go in it.
  lines = pathlib.Path("/proc/self/mountinfo").read_text().splitlines()
  mounts = sum(f"/{tag}-" in ln for ln in lines)
  out = dict(processes=sorted(procs), cgroups=cg, state_dirs=run, mounts=mounts)
  out["uid_leases"] = _our_uid_sockets()
  out["live"] = len(common.live())
  if docker_unavailable() is None:
    from envs.sandbox import docker_backend  # noqa: PLC0415

    owner = f"{common.machine_id()}|{tag}"
    api = docker_backend.client().api
    mine = api.containers(all=True, filters={"label": f"{docker_backend.OWNER}={owner}"})
    out["containers"] = sorted(c["Id"] for c in mine)
    out["volumes"] = len(api.volumes().get("Volumes") or [])
  return out


def new_leaks(before: dict, after: dict) -> dict:
  """What `after` holds that `before` did not (things may also have gone away meanwhile)."""
  out = {}
  for k, v in after.items():
    if isinstance(v, list):
      extra = sorted(set(v) - set(before.get(k, [])))
    else:
      extra = v - before.get(k, 0) if v > before.get(k, 0) else 0
    if extra:
      out[k] = extra
  return out


def describe_processes(pids) -> list[str]:
  out = []
  for p in pids:
    try:
      out.append(f"{p}: {pathlib.Path(f'/proc/{p}/cmdline').read_bytes()[:200]!r}")
    except OSError:
      pass
  return out


def host_ip() -> str | None:
  """This machine's address on its default route (never contacted outside the machine)."""
  s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
  try:
    s.connect(("192.0.2.1", 9))  # TEST-NET-1, UDP connect sends nothing
    return s.getsockname()[0]
  except OSError:
    return None
  finally:
    s.close()
