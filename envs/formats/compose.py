"""Reads a Terminal-Bench 1 task's docker-compose.yaml: what offline grading needs of it.

TB1 builds the agent's container from the compose file's `client` service (or its only
service): its `build` (context folder and Dockerfile, e.g. `client/Dockerfile`),
`working_dir` and `environment` apply. The harness's own variables (`${T_BENCH_...}`) and
its log volumes are dropped; other volumes and `tmpfs` mounts are reported as warnings (the
sandbox has its own writable places). A task that needs a second running service (a database,
a web server container) cannot run in one offline sandbox and fails naming them.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

import yaml

from envs.task import TaskFormatError

NAMES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
_HARNESS_VAR = re.compile(r"\$\{?T_BENCH_\w*\}?")


@dataclasses.dataclass(frozen=True)
class Build:
  """The agent container's build and run settings."""

  context: pathlib.Path
  dockerfile: pathlib.Path
  workdir: str | None = None
  env: tuple[tuple[str, str], ...] = ()
  warnings: tuple[str, ...] = ()

  def overrides(self, plan) -> dict:
    """Task fields the compose file sets over the Dockerfile's (a `working_dir`, more env)."""
    out = {}
    if self.workdir:
      out["workdir"] = self.workdir
    if self.env:
      out["env"] = tuple(dict(plan.env + self.env).items())
    return out


def _env(value, file: pathlib.Path) -> tuple[tuple[str, str], ...]:
  items = (
    value.items()
    if isinstance(value, dict)
    else [(str(x).split("=", 1) + [""])[:2] for x in (value or [])]
  )
  out = []
  for k, v in items:
    v = "" if v is None else str(v)
    if _HARNESS_VAR.search(v) or re.search(r"\$\{?\w+", v):
      continue  # the harness fills these in; offline the verifier sets its own
    out.append((str(k), v))
  return tuple(out)


def read(root: pathlib.Path) -> Build:
  """The build of `root`'s agent container; a plain `Dockerfile` in `root` without compose."""
  path = next((root / n for n in NAMES if (root / n).is_file()), None)
  if path is None:
    return Build(root, root / "Dockerfile")
  try:
    data = yaml.safe_load(path.read_text()) or {}
  except yaml.YAMLError as e:
    raise TaskFormatError(path, "<syntax>", f"invalid YAML: {e}") from None
  services = data.get("services") if isinstance(data, dict) else None
  if not isinstance(services, dict) or not services:
    raise TaskFormatError(path, "services", "no services")
  name = "client" if "client" in services else next(iter(services))
  others = sorted(n for n in services if n != name)
  if others:
    raise TaskFormatError(
      path,
      "services",
      f"needs services {', '.join(others)} beside {name!r}; one offline sandbox runs one container",
    )
  svc = services[name] or {}
  build = svc.get("build", ".")
  build = {"context": build} if isinstance(build, str) else (build or {})
  context = (root / str(build.get("context", "."))).resolve()
  if not context.is_relative_to(root.resolve()):
    raise TaskFormatError(path, f"services.{name}.build.context", "outside the task folder")
  dockerfile = (context / str(build.get("dockerfile", "Dockerfile"))).resolve()
  if not dockerfile.is_relative_to(root.resolve()):
    raise TaskFormatError(path, f"services.{name}.build.dockerfile", "outside the task folder")
  warnings = []
  for v in svc.get("volumes") or []:
    if not _HARNESS_VAR.search(str(v)):
      warnings.append(f"{path.name}: volume {v} not mounted (the sandbox has no host mounts)")
  tmpfs = svc.get("tmpfs") or []
  for t in [tmpfs] if isinstance(tmpfs, str) else tmpfs:
    warnings.append(f"{path.name}: tmpfs {t} not mounted (a plain folder of the sandbox instead)")
  workdir = svc.get("working_dir")
  if workdir is not None and not str(workdir).startswith("/"):
    raise TaskFormatError(path, f"services.{name}.working_dir", "must be an absolute path")
  root_r = root.resolve()
  return Build(
    root if context == root_r else context,
    dockerfile,
    str(workdir) if workdir else None,
    _env(svc.get("environment"), path),
    tuple(warnings),
  )
