"""Sandboxes: `make(backend, spec)` returns a live `Sandbox` (see base.py for the interface).

Backends: `bwrap` (bubblewrap; the fast default) and `docker` (docker SDK; local daemon or
DOCKER_HOST). Both run the task image built by `python -m launch.build_image`.
"""

from __future__ import annotations

from collections.abc import Callable

from envs.sandbox.base import (
  ExecResult,
  PackageMissingError,
  Sandbox,
  SandboxError,
  SandboxExhaustedError,
  SandboxSpec,
  TransferLimitError,
)

__all__ = [
  "BACKENDS", "ExecResult", "PackageMissingError", "Sandbox", "SandboxError", "SandboxExhaustedError", "SandboxSpec", "TransferLimitError",
  "make", "register",
]  # fmt: skip


def _bwrap(spec: SandboxSpec, **kw) -> Sandbox:
  from envs.sandbox.bwrap import BwrapSandbox  # noqa: PLC0415 (imported on use)

  return BwrapSandbox(spec, **kw)


def _docker(spec: SandboxSpec, **kw) -> Sandbox:
  from envs.sandbox.docker_backend import DockerSandbox  # noqa: PLC0415 (the SDK is slow to import)

  return DockerSandbox(spec, **kw)


BACKENDS: dict[str, Callable[..., Sandbox]] = {"bwrap": _bwrap, "docker": _docker}


def register(name: str, factory: Callable[..., Sandbox]) -> None:
  """Adds a backend: `factory(spec, **options) -> Sandbox`."""
  BACKENDS[name] = factory


def make(backend: str, spec: SandboxSpec | None = None, **options) -> Sandbox:
  """A new live sandbox of `backend` ('bwrap' or 'docker') built from `spec`."""
  if backend not in BACKENDS:
    raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {sorted(BACKENDS)}")
  return BACKENDS[backend](spec or SandboxSpec(), **options)
