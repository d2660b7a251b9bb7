"""Device mesh over the axes (data, fsdp, tensor, sequence, expert).

`MeshConfig` gives one size per axis; a single -1 takes whatever devices remain. Every axis
gets an explicit `jax.sharding.AxisType`. The default is `Auto` (the compiler propagates
shardings from the `constrain` hints and the in/out shardings of jit); `Explicit` is offered
for code written for sharding-in-types, which the models here are not.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from parallel.rules import MESH_AXES

_AXIS_TYPES = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """Mesh axis sizes; one of them may be -1 (fill with the remaining devices)."""

  data: int = 1
  fsdp: int = -1
  tensor: int = 1
  sequence: int = 1
  expert: int = 1
  axis_type: str = "auto"  # 'auto' | 'explicit', applied to every axis

  def sizes(self) -> dict[str, int]:
    return {a: getattr(self, a) for a in MESH_AXES}


def resolve_sizes(cfg: MeshConfig, n_devices: int) -> dict[str, int]:
  """Axis sizes with the -1 filled in; raises naming the axes and the device count."""
  sizes = cfg.sizes()
  desc = " x ".join(f"{a}={s}" for a, s in sizes.items())
  fills = [a for a, s in sizes.items() if s == -1]
  bad = [a for a, s in sizes.items() if s == 0 or s < -1]
  if bad:
    raise ValueError(f"MeshConfig: axis size must be >= 1 or -1, got {desc}")
  if len(fills) > 1:
    raise ValueError(f"MeshConfig: at most one axis may be -1, got {desc} ({', '.join(fills)})")
  fixed = math.prod(s for s in sizes.values() if s != -1)
  if fills:
    if n_devices % fixed:
      raise ValueError(
        f"MeshConfig: {desc} cannot fill {n_devices} devices: the fixed axes multiply to "
        f"{fixed}, which does not divide {n_devices}"
      )
    sizes[fills[0]] = n_devices // fixed
  elif fixed != n_devices:
    raise ValueError(
      f"MeshConfig: {desc} needs {fixed} devices but {n_devices} are available; "
      "set one axis to -1 to fill"
    )
  return sizes


def make_mesh(cfg: MeshConfig = MeshConfig(), devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Builds the 5-axis mesh (axis order as MESH_AXES) with explicit axis types."""
  if cfg.axis_type not in _AXIS_TYPES:
    raise ValueError(
      f"MeshConfig.axis_type must be one of {sorted(_AXIS_TYPES)}, got {cfg.axis_type!r}"
    )
  devices = list(devices) if devices is not None else jax.devices()
  sizes = resolve_sizes(cfg, len(devices))
  shape = tuple(sizes[a] for a in MESH_AXES)
  types = (_AXIS_TYPES[cfg.axis_type],) * len(MESH_AXES)
  if len(devices) == len(jax.devices()):
    # jax.make_mesh orders devices for the physical topology (ICI rings on TPU).
    return jax.make_mesh(shape, MESH_AXES, axis_types=types, devices=devices)
  return Mesh(np.asarray(devices).reshape(shape), MESH_AXES, axis_types=types)


def single_device_mesh(device: jax.Device | None = None) -> Mesh:
  """A 1x1x1x1x1 mesh on one device (the reference for sharded-vs-single tests)."""
  device = device or jax.devices()[0]
  return make_mesh(MeshConfig(fsdp=1), devices=[device])
