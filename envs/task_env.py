"""A task's sandbox: create it from the task, copy files in, run the setup, remember the start.

`open_task_sandbox(task, backend)` returns a `TaskSandbox`: the live sandbox, the spec it was
made from (image and limits: `reopen()` builds a fresh copy of the same environment), the
workspace manifest right after setup (for tamper detection) and, when asked, a pristine
snapshot that `reset()` restores, so one sandbox serves many episodes of the same task.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shlex
import tempfile
import uuid

from envs import sandbox as sandbox_lib
from envs.grading.workspace import manifest_cmd
from envs.sandbox import services
from envs.sandbox.base import Sandbox, SandboxError, SandboxSpec, passwd_entry
from envs.task import FileEntry, Task

SETUP_DIR = "/tmp/.agentrl-setup"
SETUP_FAILED_RC = 97  # set by translated Dockerfile steps that cannot be replayed


class TaskSetupError(RuntimeError):
  """The task's environment could not be built (a task defect, not an infrastructure one)."""


KILL_STRAYS = services.kill_script()  # the in-sandbox backstop (envs.sandbox.services)


_SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(SandboxSpec))


def task_spec(
  task: Task, image: str = "default", package_egress: bool = True, **overrides
) -> SandboxSpec:
  """The SandboxSpec a task asks for; keyword overrides win. `package_egress=False` turns a
  task's network="packages" (package sources only) into no network at all.

  A translated task's packages and sandbox mode go to the SandboxSpec fields `apt_packages`,
  `pip_packages` and `mode` where this SandboxSpec has them (its USER applies after set-up:
  `open_task_sandbox`). A task that needs the container-like mode on a sandbox without it is a
  TaskSetupError (the task cannot run here).
  """
  r = task.resources
  kw = dict(
    image=image,
    cpus=r.cpus,
    memory_mb=r.memory_mb,
    pids=r.pids,
    disk_mb=r.disk_mb,
    exec_timeout_s=max(30.0, task.agent_timeout_s),
    episode_timeout_s=task.agent_timeout_s + 2 * task.test_timeout_s + 300.0,
    network=task.network if package_egress or task.network != "packages" else False,
    env=task.env,
    workdir=task.workdir,
  )
  wanted = {
    "apt_packages": task.apt_packages,
    "apt_no_recommends": task.apt_no_recommends,
    "pip_packages": task.pip_packages,
    "mode": task.sandbox_mode,
  }
  kw.update({k: v for k, v in wanted.items() if v and k in _SPEC_FIELDS})
  kw.update(overrides)
  if task.sandbox_mode == "container" and "mode" not in _SPEC_FIELDS:
    raise TaskSetupError(
      f"task {task.id}: writes outside its workspace (see its dockerfile_warnings) and needs the "
      "container-like sandbox mode, which this sandbox backend does not have"
    )
  return SandboxSpec(**kw)


def put_files(sb: Sandbox, dest: str, files: tuple[FileEntry, ...]) -> None:
  """Copies task files into the sandbox under `dest` with one upload."""
  if not files:
    return
  with tempfile.TemporaryDirectory(prefix="agentrl-files-") as tmp:
    for f in files:
      p = pathlib.Path(tmp, f.path)
      p.parent.mkdir(parents=True, exist_ok=True)
      p.write_bytes(f.data)
      p.chmod(f.mode & 0o777)
    sb.upload(tmp, dest)


def run_checked(sb: Sandbox, cmd: str, timeout_s: float, what: str) -> str:
  """Runs a grader-side command; an infrastructure failure raises SandboxError."""
  r = sb.exec(cmd, timeout_s=timeout_s)
  if r.exit_code != 0 or r.timed_out:
    raise SandboxError(
      f"{what} failed (exit {r.exit_code}, timed_out={r.timed_out}): {r.stderr[-2000:]}"
    )
  return r.stdout


def workspace_manifest(sb: Sandbox, workdir: str, timeout_s: float = 60.0) -> dict[str, str]:
  out = run_checked(sb, manifest_cmd(workdir), timeout_s, "workspace manifest")
  return json.loads(out.strip().splitlines()[-1])


def kill_strays(
  sb: Sandbox, backstop: bool = True, keep_services: bool = False
) -> tuple[services.Service, ...]:
  """Kills every agent process by cgroup / pid namespace (the backend's `kill_strays`), then
  runs the in-sandbox backstop for backends without one. `keep_services`: the processes that
  listen on a socket, and their descendants, survive (envs.sandbox.services); returns them."""
  pid1 = sb.host_init_pid() if keep_services else None
  kept = services.find(pid1) if pid1 is not None else ()
  try:
    sb.kill_strays(kept)
  except NotImplementedError:
    backstop = True
  if backstop:
    sb.exec(services.kill_script(kept), timeout_s=30)
  return kept


def sandbox_home(sb: Sandbox) -> str | None:
  """The sandbox user's home, read without a login shell (which the agent may have hijacked)."""
  home = getattr(sb, "home", None)
  if home:
    return home
  try:
    f = passwd_entry(sb.read_file("/etc/passwd"), getattr(sb, "user", sb.spec.user))
    return f[5] if f else None
  except (OSError, SandboxError):
    pass
  return None


def neutralize_login(sb: Sandbox) -> None:
  """Makes `bash -l` read an empty ~/.bash_profile (bash then skips .bash_login and .profile).

  Every exec is a login shell, so a profile the agent wrote (`exit 0`, a daemon, a fake PATH)
  would run before each grader command; file operations bypass the shell.
  """
  home = sandbox_home(sb)
  if home:
    sb.write_file(f"{home}/.bash_profile", b"", 0o644)


def run_setup(sb: Sandbox, task: Task) -> None:
  """Copies workspace and setup files in and runs the setup script in the workspace."""
  put_files(sb, task.workdir, task.workspace_files)
  if not task.setup_script.strip():
    return
  setup_dir = f"{SETUP_DIR}-{uuid.uuid4().hex[:8]}"
  files = task.setup_files + (FileEntry("setup.sh", task.setup_script.encode(), 0o755),)
  put_files(sb, setup_dir, files)
  cmd = f"cd {shlex.quote(task.workdir)} && SETUP_DIR={setup_dir} bash {setup_dir}/setup.sh"
  r = sb.exec(cmd, timeout_s=max(60.0, task.test_timeout_s))
  sb.exec(f"rm -rf {setup_dir}", timeout_s=30)
  if r.timed_out or r.exit_code != 0:
    why = "timed out" if r.timed_out else f"exit code {r.exit_code}"
    raise TaskSetupError(
      f"task {task.id}: environment setup {why}\n--- stderr ---\n{r.stderr[-4000:]}\n--- stdout ---\n{r.stdout[-2000:]}"
    )


def switch_user(sb: Sandbox, task: Task) -> None:
  """The Dockerfile's USER, as Docker has it: set-up ran as root, the agent and the tests run
  as USER (container mode; the read-only mode has its own user)."""
  if not task.user or sb.spec.mode != "container":  # "": root (envs.formats.dockerfile.translate)
    return
  try:
    sb.run_as(task.user)
  except ValueError as e:
    raise TaskSetupError(f"task {task.id}: Dockerfile USER {task.user}: {e}") from e


@dataclasses.dataclass
class TaskSandbox:
  """A live sandbox prepared for one task."""

  sandbox: Sandbox
  task: Task
  backend: str
  spec: SandboxSpec  # what the sandbox was made from (image, limits), before any run_as
  baseline: dict[str, str]  # workspace manifest right after setup
  pristine: str | None = None  # snapshot id right after setup
  # protected system paths changed by setup (Sandbox.system_fingerprint); None: read-only root
  system_baseline: dict[str, str] | None = None

  def reset(self) -> None:
    """Back to the state right after setup: no agent process, pristine workspace."""
    if self.pristine is None:
      raise ValueError("this TaskSandbox was opened without a pristine snapshot")
    neutralize_login(self.sandbox)
    kill_strays(self.sandbox)
    self.sandbox.restore(self.pristine)

  def reopen(self, snapshot: bool = False) -> TaskSandbox:
    """A fresh copy of this task environment: same backend and spec (image included)."""
    return open_with_spec(self.task, self.backend, self.spec, snapshot)

  def close(self) -> None:
    self.sandbox.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False


def open_task_sandbox(
  task: Task,
  backend: str = "bwrap",
  image: str = "default",
  snapshot: bool = False,
  **spec_overrides,
) -> TaskSandbox:
  """Creates the sandbox, builds the task environment, records the baseline.

  Raises TaskSetupError when the task's own setup fails and SandboxError for infrastructure.
  """
  return open_with_spec(task, backend, task_spec(task, image, **spec_overrides), snapshot)


def open_with_spec(
  task: Task, backend: str, spec: SandboxSpec, snapshot: bool = False
) -> TaskSandbox:
  """`open_task_sandbox` with the SandboxSpec already built (`TaskSandbox.reopen`)."""
  try:
    sb = sandbox_lib.make(backend, spec)
  except sandbox_lib.PackageMissingError as e:  # the task asks for what does not exist
    raise TaskSetupError(f"{task.source or task.id}: {e}") from e
  except ValueError as e:  # the task's spec cannot work (check_spec names the field)
    raise TaskSetupError(f"{task.source or task.id}: sandbox spec: {e}") from e
  try:
    run_setup(sb, task)
    switch_user(sb, task)
    baseline = workspace_manifest(sb, task.workdir)
    system = sb.system_fingerprint()
    pristine = sb.snapshot() if snapshot else None
  except BaseException:
    sb.close()
    raise
  return TaskSandbox(sb, task, backend, spec, baseline, pristine, system)
