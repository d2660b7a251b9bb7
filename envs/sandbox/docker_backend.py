"""The Docker backend (docker SDK; the local daemon or DOCKER_HOST).

A sandbox is one container of the task image (`agentrl-task:<id>`), no network,
no-new-privileges, memory/CPU/pids limits. Mode "container" (Docker's own behaviour): the
container's writable layer as root, uid 0 (or the spec's user) with Docker's default
capabilities minus NET_RAW, MKNOD and AUDIT_WRITE; uid 0 is the host's uid 0 unless the daemon
runs with userns-remap (launch/setup.sh starts it so); the writable layer is capped at disk_mb
(the driver's quota, else a tmpfs over the layer folder: docker_layer.py). File transfers then go through the daemon's archive API (outside the
container: nothing in it can see them) and snapshots are committed images (restore recreates
the container from one). Mode "readonly": read-only root, tmpfs workspace, /tmp and $HOME with
size caps, a non-root user without capabilities; file operations run as uid 0 with only
CHOWN, DAC_OVERRIDE, FOWNER and KILL (a uid the agent cannot signal or ptrace). pid 1 is the same signal-proof
shell loop as bubblewrap's, so the container cannot be ended from inside and expires by itself
after its episode (a safety net if this process is SIGKILLed). Every container carries the
label `agentrl.sandbox=1` and its owner (machine, pid, start time): orphans of dead owners on
this machine are reaped at start-up and at exit.

An exec runs `/usr/bin/timeout -s KILL` inside (its whole process group dies at the limit), then every
container process started since the exec began (but pid 1's helpers) is killed from the host
(pids from the daemon, start times from the host's /proc): `setsid env -i` escapees included.
The exit status comes back as a nonce-tagged line on stderr (after a nonce marker on stdout:
docker_stream.py), so an exec returns when its command exits even if a background child keeps
the output stream open.
"""

from __future__ import annotations

import atexit
import secrets
import threading
import time
from typing import NoReturn

from envs.sandbox import common, docker_files, docker_layer, docker_stream, egress, fileops, layers
from envs.sandbox import image as image_lib
from envs.sandbox.base import ExecResult, Sandbox, SandboxError, SandboxExhaustedError, SandboxSpec

CONTAINER_CAPS = tuple(c.upper() for c in common.CONTAINER_CAPS)  # Docker's spelling
FILEOP_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL")  # readonly mode: uid 0 only

LABEL = "agentrl.sandbox"
OWNER = "agentrl.owner"
# The command's exit status comes back as it is (0-255); a signal death stays silent, as on
# bwrap: sh reports one ("Killed") on the dead command's stderr, so timeout runs with stderr
# on /dev/null and a small sh gives the command the real stderr (fd 3) before exec'ing bash.
_WRAP = (
  '/usr/bin/timeout -s KILL "$2" /bin/sh -c \'exec 2>&3 3>&- "$@"\' sh /bin/bash -lc "$3" '
  "3>&2 2>/dev/null; " + docker_stream.WRAP_TAIL
)
_KILL_TAG = (
  'for i in 1 2 3; do for p in /proc/[0-9]*; do [ "${p#/proc/}" = $$ ] && continue; '
  'grep -qsz "^AGENTRL_EXEC=$1\\$" "$p/environ" && kill -9 "${p#/proc/}" 2>/dev/null; '
  "done; done; true"
)
_OOM = "/bin/cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null"
_PIDS = (
  "/bin/cat /sys/fs/cgroup/pids.current /sys/fs/cgroup/pids/pids.current 2>/dev/null; "
  "/bin/cat /sys/fs/cgroup/pids.events /sys/fs/cgroup/pids/pids.events 2>/dev/null"
)

_CLIENT = None
_CLIENT_LOCK = threading.Lock()


def client():
  """The process's Docker client (pinged once); SandboxError if no daemon answers."""
  global _CLIENT
  with _CLIENT_LOCK:
    if _CLIENT is None:
      import docker  # noqa: PLC0415 (slow import, only when Docker is used)

      try:
        c = docker.from_env(timeout=120, max_pool_size=64)
        c.ping()
      except Exception as e:  # noqa: BLE001 (any failure: the daemon is not usable)
        raise SandboxError(f"no reachable Docker daemon: {type(e).__name__}: {e}") from e
      _CLIENT = c
      reap_orphans()
      atexit.register(reap_orphans)
    return _CLIENT


def reap_orphans() -> int:
  """Removes agentrl containers (and snapshot images) of this machine whose owner is gone."""
  if _CLIENT is None:
    return 0
  me, n = common.machine_id(), 0
  try:
    boxes = _CLIENT.api.containers(all=True, filters={"label": f"{LABEL}=1"})
  except Exception:  # noqa: BLE001 (best effort at start-up/exit)
    return 0
  for c in boxes:
    machine, _, owner = c["Labels"].get(OWNER, "").rpartition("|")
    if machine == me and not common.owner_alive(owner):
      _remove(_CLIENT.api, c["Id"])
      n += 1
  try:  # committed snapshots carry their container's labels
    images = _CLIENT.api.images(filters={"label": f"{LABEL}=1"})
  except Exception:  # noqa: BLE001
    return n
  for img in images:
    machine, _, owner = (img.get("Labels") or {}).get(OWNER, "").rpartition("|")
    if machine == me and not common.owner_alive(owner):
      try:
        _CLIENT.api.remove_image(img["Id"], force=True)
        n += 1
      except Exception:  # noqa: BLE001, S110 (in use or gone)
        pass
  return n


def _remove(api, cid: str) -> None:
  import docker.errors  # noqa: PLC0415

  try:
    api.remove_container(cid, force=True, v=True)
  except docker.errors.NotFound:
    pass
  except docker.errors.APIError as e:
    if "already in progress" not in str(e):
      raise


class DockerSandbox(docker_files.ArchiveFileOps, fileops.TarFileOps, Sandbox):
  """A Docker sandbox; `docker_client` defaults to docker.from_env() (DOCKER_HOST aware)."""

  def __init__(self, spec: SandboxSpec, docker_client=None):
    common.check_spec(spec)
    with common.creating():
      self._make(spec, docker_client)

  def _make(self, spec: SandboxSpec, docker_client) -> None:
    self.spec, self._closed, self._lock, self.id = spec, False, threading.RLock(), None
    self.name = common.unique_name()
    self.api = (docker_client or client()).api
    from envs.sandbox.bwrap_host import run_setup_script  # noqa: PLC0415

    img = layers.resolve_spec_image(spec, run_setup_script)
    self.image, self.user = img, common.user_name(spec)
    self.uid, self.gid, self.home = img.user(self.user)
    tag = image_lib.ensure_docker(img, docker_client or client())
    self._tag = tag
    self._end = time.monotonic() + spec.episode_timeout_s
    self._oom_seen = 0
    self.egress = egress.for_spec(spec, self.name)  # network="packages": the package proxy
    # Whether the writable root is size-capped (by the storage driver or a tmpfs layer).
    self.disk_capped = spec.mode == "readonly" or docker_layer.driver_caps_layer(self.api)
    try:
      self._create(tag)
      common.register(self)
      seed = img.rootfs / spec.workdir.lstrip("/")
      if spec.mode == "readonly" and seed.is_dir() and any(seed.iterdir()):
        self.upload(str(seed), spec.workdir)
    except BaseException:
      self.close()
      raise

  def _create(self, tag: str) -> None:
    import docker.errors  # noqa: PLC0415

    s, u = self.spec, f"uid={self.uid},gid={self.gid}"
    tmpfs = {}
    if s.mode == "readonly":
      tmpfs = {self.home: f"size={common.HOME_MB}m,{u},mode=0755"}  # the workdir wins a tie
      tmpfs["/tmp"] = f"size={s.disk_mb}m,mode=1777,exec"
      tmpfs[s.workdir] = f"size={s.disk_mb}m,{u},mode=0755,exec"
    mem, sized = s.memory_mb << 20, docker_layer.driver_caps_layer(self.api)
    hc = self.api.create_host_config(
      network_mode="bridge" if common.host_network(s) else "none",
      binds={p: {"bind": p, "mode": "ro"} for p in self.egress.sources.folders()}
      if self.egress
      else None,
      read_only=s.mode == "readonly",
      tmpfs=tmpfs,
      shm_size=s.disk_mb << 20,
      cap_drop=["ALL"],
      cap_add=list(CONTAINER_CAPS if s.mode == "container" else FILEOP_CAPS),
      storage_opt={"size": f"{s.disk_mb}m"} if s.mode == "container" and sized else None,
      security_opt=["no-new-privileges"],
      mem_limit=mem,
      memswap_limit=mem,
      pids_limit=s.pids,
      nano_cpus=int(s.cpus * 1e9),
    )
    life = s.episode_timeout_s + common.LIFETIME_GRACE_S
    owner = f"{common.machine_id()}|{common.owner_tag()}"
    try:
      c = self.api.create_container(
        tag,
        ["/bin/sh", "-c", common.INIT_SCRIPT, *common.init_args(False, life)],
        user="0:0",  # pid 1; execs name their user (readonly mode: uid 0 keeps FILEOP_CAPS)
        working_dir=s.workdir,
        hostname="sandbox",
        labels={LABEL: "1", OWNER: owner},
        host_config=hc,  # network "none": loopback only, and an /etc/hosts naming localhost
      )
      self.id = c["Id"]
      if s.mode == "container" and not sized:  # overlay2 on ext4 ignores storage_opt
        self.disk_capped = docker_layer.cap_layer(self.api, self.id, s.disk_mb << 20) is not None
      self.api.start(self.id)
      if self.egress is not None:  # in the container's own network namespace (local daemon)
        self.egress.attach(self.api.inspect_container(self.id)["State"]["Pid"])
    except docker.errors.DockerException as e:
      raise SandboxError(f"docker could not start a sandbox: {e}") from e

  def _recreate(self, image: str) -> None:
    """A new container from `image` in place of this one (restoring a committed snapshot)."""
    with self._lock:
      self._check_open()
      _remove(self.api, self.id)
      self.id = None
      self._create(image)

  # --- exec ---------------------------------------------------------------------------------

  def _check_open(self) -> None:
    if self._closed:
      raise SandboxError(f"sandbox {self.name} is closed")

  def _start_exec(
    self, argv, tag: str, stdin, user: str | None = None
  ) -> tuple[str, docker_stream.ExecStream]:
    import docker.errors  # noqa: PLC0415

    self._check_open()
    env = common.sandbox_env(self.spec, self.home, tag, self.egress)

    def start() -> tuple[str, docker_stream.ExecStream]:
      e = self.api.exec_create(
        self.id,
        argv,
        stdin=stdin is not None,
        user=user or f"{self.uid}:{self.gid}",
        workdir=self.spec.workdir,
        environment=env,
      )
      sock = self.api.exec_start(e["Id"], socket=True)
      return e["Id"], docker_stream.ExecStream(sock, stdin)

    try:
      return start()
    except docker.errors.DockerException as err:
      # Only we pause (the kill pass); a pause the daemon finished after answering us with an
      # error outlives that pass: thaw it once and try again.
      if not ("is paused" in str(err) and self._freeze(False)):
        self._raise_infra(err)
    try:
      return start()
    except docker.errors.DockerException as err:
      self._raise_infra(err)

  def _raise_infra(self, err) -> NoReturn:
    state = "closed" if self._closed else ("alive" if self.alive else "dead")
    if state == "dead" and self._oom_killed():
      raise SandboxExhaustedError(f"docker exec failed (sandbox dead, OOM-killed): {err}") from err
    raise SandboxError(f"docker exec failed (sandbox {state}): {err}") from err

  def _oom_killed(self) -> bool:
    import docker.errors  # noqa: PLC0415

    try:
      return bool(self.api.inspect_container(self.id)["State"].get("OOMKilled"))
    except docker.errors.DockerException:
      return False

  def exec(self, cmd: str, timeout_s: float | None = None, stdin: str | None = None) -> ExecResult:
    t0 = time.monotonic()
    timeout = self.spec.exec_timeout_s if timeout_s is None else timeout_s
    if self._end - t0 <= 0:
      self._check_open()
      return ExecResult(137, "", "episode time limit reached", timed_out=True)
    limit = min(timeout, self._end - t0)
    nonce, tag = secrets.token_hex(8), f"{self.name}-{time.monotonic_ns()}"
    data = stdin.encode() if isinstance(stdin, str) else stdin
    argv = ["/bin/sh", "-c", _WRAP, "sh", nonce, f"{limit:.3f}", cmd]
    since = docker_files.boot_ticks()
    _, stream = self._start_exec(argv, tag, data)
    cap = self.spec.max_output_bytes
    out, err = common.Capped(cap), common.Capped(cap)
    rc = docker_stream.pump(stream, out, err, nonce.encode(), t0 + limit + 5.0)
    timed_out = rc is None or (rc == 137 and time.monotonic() - t0 >= limit - 0.05)
    if timed_out:
      if not self._kill_since(since):  # a remote daemon: its pids are not ours
        self._run(["/bin/sh", "-c", _KILL_TAG, "sh", tag], timeout_s=60)
      rc = 137
    oom = rc == 137 and not timed_out and self._new_oom()
    return common.make_result(rc, out, err, timed_out, t0, oom)

  def _new_oom(self) -> bool:
    rc, text, _ = self._run(["/bin/sh", "-c", _OOM])
    n = next(
      (int(ln.split()[1]) for ln in text.decode().splitlines() if ln.startswith("oom_kill ")), 0
    )
    new, self._oom_seen = n > self._oom_seen, max(n, self._oom_seen)
    return new

  def _run(self, argv, stdin=None, stdout=None, timeout_s: float | None = None, cap=None):
    """Runs argv inside as uid 0 (readonly mode: a uid the agent cannot reach) for file
    operations and probes; see TarFileOps. stdout is capped at `cap` bytes."""
    deadline = time.monotonic() + (timeout_s or self._io_timeout())
    eid, stream = self._start_exec(argv, f"{self.name}-io", stdin, user="0:0")
    out, err = common.Capped(cap, sink=stdout), common.Capped(1 << 20)
    try:
      while time.monotonic() < deadline:
        for kind, data in stream.frames(deadline - time.monotonic()):
          if kind == 1:
            out.add(data)
            common.check_transfer(out, cap, argv[:3])
          elif kind == 2:
            err.add(data)
      raise SandboxError(f"file operation {argv[:3]} timed out")
    except EOFError:
      pass
    finally:
      stream.close()
    return self._exit_code(eid), bytes(out.buf), bytes(err.buf)

  def _exit_code(self, eid: str) -> int:
    for _ in range(200):
      info = self.api.exec_inspect(eid)
      if not info["Running"]:
        return int(info["ExitCode"])
      time.sleep(0.005)
    raise SandboxError("docker exec did not finish after its output closed")

  # --- state ------------------------------------------------------------------------------

  @property
  def alive(self) -> bool:
    if self._closed or self.id is None:
      return False
    try:
      return bool(self.api.inspect_container(self.id)["State"]["Running"])
    except Exception:  # noqa: BLE001 (a daemon error means: not usable)
      return False

  def system_fingerprint(self) -> dict[str, str] | None:
    if self.spec.mode != "container":
      return None  # read-only root
    self._check_open()
    return docker_layer.fingerprint(self.api, self.id)

  def system_layers(self) -> tuple[str, tuple[str, ...]] | None:
    if self.spec.mode != "container":
      return None
    self._check_open()
    return docker_layer.layers(self.api, self.id)

  def pids_stats(self) -> tuple[int, int] | None:
    """(tasks now, forks refused at the pids limit), read from the container's cgroup."""
    _, text, _ = self._run(["/bin/sh", "-c", _PIDS])
    lines = text.decode().split("\n")
    try:
      refused = next((int(ln.split()[1]) for ln in lines if ln.startswith("max ")), 0)
      return int(lines[0]), refused
    except (ValueError, IndexError) as e:
      raise SandboxError(f"unreadable pids cgroup in the container: {text[:200]!r}") from e

  def close(self) -> None:
    with self._lock:
      if self._closed:
        return
      self._closed = True
    try:
      if self.id is not None:
        _remove(self.api, self.id)
    finally:
      if self.egress is not None:
        self.egress.close()
      self._drop_snapshots()
      self._drop_images()
      common.unregister(self)
