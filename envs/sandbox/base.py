"""The one Sandbox interface every backend implements.

A sandbox is an isolated place to run model-generated shell commands: no network (or, opted
in, only the machine's package sources: `network="packages"`, egress.py), resource
limits, and either a container-like root (mode "container": uid 0 inside a user namespace, a
copy-on-write overlay of the image as a writable root) or a read-only root with a writable
workspace (mode "readonly": a non-root user). Backends:
`bwrap` (bubblewrap; the fast default) and `docker` (docker SDK; local or DOCKER_HOST).
"""

from __future__ import annotations

import abc
import dataclasses


class SandboxError(RuntimeError):
  """An infrastructure failure (the sandbox died, the daemon failed): never a task failure."""


class SandboxExhaustedError(SandboxError):
  """The sandbox died because its own processes exhausted its limits (an OOM kill in its
  cgroup, e.g. tmpfs filled past the memory limit): the agent's doing, graded as a failure."""


class PackageMissingError(SandboxError):
  """A package the spec asks for does not exist in the machine's sources (the task's defect)."""


class TransferLimitError(OSError):
  """A file transfer or snapshot hit a host-side byte cap: caused by the sandbox's contents
  (the agent's doing, not an infrastructure failure)."""


MODES = ("container", "readonly")
# False: loopback only. True: the host's network (bwrap) or Docker's bridge. "packages": only
# the machine's configured package sources, through an allow-list proxy (egress.py).
NETWORKS = (False, True, "packages")


@dataclasses.dataclass(frozen=True)
class SandboxSpec:
  """What a sandbox is made of and what it may use."""

  image: str = "default"  # image name/id; "default" is the project's built task rootfs
  cpus: float = 1.0
  memory_mb: int = 1024
  pids: int = 256
  disk_mb: int = 512  # workspace (and /tmp) quota
  exec_timeout_s: float = 30.0  # default per-exec wall-clock limit
  episode_timeout_s: float = 1800.0  # wall-clock limit over the sandbox's whole life
  max_output_bytes: int = 1 << 20  # per stream, per exec
  network: bool | str = False  # one of NETWORKS
  env: tuple[tuple[str, str], ...] = ()
  workdir: str = "/workspace"
  # None: the mode's default user ("root" in container mode, "agent" in readonly mode)
  user: str | None = None
  setup_script: str | None = None  # shell run once on top of the image at creation
  # "container": uid 0 (or `user`) in a user namespace, the image as a copy-on-write writable
  # root (disk_mb caps what is written anywhere). "readonly": read-only root, tmpfs workdir,
  # /tmp and $HOME (disk_mb each), a non-root user.
  mode: str = "container"
  apt_packages: tuple[str, ...] = ()  # installed into a cached image layer at build time
  # of apt_packages, those installed with --no-install-recommends (the rest get recommends, as
  # Debian's apt and Docker builds do)
  apt_no_recommends: tuple[str, ...] = ()
  pip_packages: tuple[str, ...] = ()  # likewise (pip requirement specifiers)


@dataclasses.dataclass(frozen=True)
class ExecResult:
  exit_code: int
  stdout: str
  stderr: str
  timed_out: bool = False
  truncated: bool = False
  duration_s: float = 0.0
  oom_killed: bool = False


class Sandbox(abc.ABC):
  """A live sandbox. Use as a context manager; `close()` is idempotent and never leaks."""

  spec: SandboxSpec

  @abc.abstractmethod
  def exec(self, cmd: str, timeout_s: float | None = None, stdin: str | None = None) -> ExecResult:
    """Runs `cmd` with bash -lc in the workdir; the whole process tree dies on timeout."""

  @abc.abstractmethod
  def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None: ...

  @abc.abstractmethod
  def read_file(self, path: str) -> bytes: ...

  @abc.abstractmethod
  def upload(self, host_path: str, sandbox_path: str) -> None:
    """Copies a host file or directory tree into the sandbox."""

  @abc.abstractmethod
  def download(self, sandbox_path: str, host_path: str) -> None:
    """Copies a sandbox file or directory tree out to the host."""

  @abc.abstractmethod
  def snapshot(self) -> str:
    """Captures the workspace (and writable filesystem state); returns a snapshot id.

    The built-in backends snapshot every writable place (workdir, /tmp, $HOME); the id is a
    host tar file that any open sandbox can restore until the one that took it is closed.
    """

  @abc.abstractmethod
  def restore(self, snapshot_id: str) -> None:
    """Restores a snapshot byte-identically."""

  @abc.abstractmethod
  def close(self) -> None: ...

  @property
  @abc.abstractmethod
  def alive(self) -> bool: ...

  def kill_strays(self, keep: tuple = ()) -> None:
    """Kills every process of the sandbox but its init (by cgroup or pid namespace, never by
    name), so nothing the agent left running survives into grading; but `keep`, the services
    that envs.sandbox.services.find chose (grading with keep_services)."""
    raise NotImplementedError

  def host_init_pid(self) -> int | None:
    """The host pid of the sandbox's init (pid 1 of its pid namespace), where the host can see
    the sandbox's processes; None elsewhere."""
    return None

  def pids_stats(self) -> tuple[int, int] | None:
    """(processes now, forks refused at the pids limit), if the backend can tell."""
    return None

  def system_fingerprint(self) -> dict[str, str] | None:
    """Digests of the protected system paths changed in the writable root, read host-side
    (system_guard.py); None where the root is read-only (the agent cannot change them)."""
    return None

  def system_layers(self) -> tuple[str, tuple[str, ...]] | None:
    """(writable layer, the image's layers top first) as host folders, where the host can
    read them (container mode); None elsewhere."""
    return None

  def package_sources(self):
    """The PackageSources this sandbox could reach (network="packages"), else None."""
    egress = getattr(self, "egress", None)
    return egress.sources if egress is not None else None

  def run_as(self, user: str) -> None:
    """Later execs and file transfers run as `user`, a Dockerfile USER resolved as Docker does
    against the sandbox's own /etc/passwd and /etc/group (created by its set-up, which ran as
    root): `name` or `uid`, optionally `:group` or `:gid`; a uid with no passwd entry runs
    with gid 0 and HOME /. Container mode only."""
    if self.spec.mode != "container":
      raise ValueError(f"run_as({user!r}): only in container mode, not {self.spec.mode!r}")
    name, _, group = user.partition(":")
    ent = passwd_entry(self.read_file("/etc/passwd"), name)
    if ent is not None:
      name, uid, gid, home = ent[0], int(ent[2]), int(ent[3]), ent[5]
    elif name.isdigit():
      uid, gid, home = int(name), 0, "/"
    else:
      raise ValueError(f"/etc/passwd: no user {name!r}")
    if group:
      gent = passwd_entry(self.read_file("/etc/group"), group, 3)
      if gent is None and not group.isdigit():
        raise ValueError(f"/etc/group: no group {group!r}")
      gid = int(gent[2]) if gent is not None else int(group)
    self.spec = dataclasses.replace(self.spec, user=name)
    self.user, self.uid, self.gid, self.home = name, uid, gid, home

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False


def passwd_entry(raw: bytes, key: str, width: int = 7) -> list[str] | None:
  """The fields of the /etc/passwd line (width 7; /etc/group: 3) whose name (field 0) or id
  (field 2) is `key`; None when there is none."""
  for line in raw.decode(errors="replace").splitlines():
    f = line.split(":")
    if len(f) >= width and key in (f[0], f[2]):
      return f
  return None
