"""NamedShardings for params, optimizer state and host batches, from logical axis names.

Legend: B batch rows, T tokens per row, S sequence slots per row (packing), N any.
Params: `axes` is a pytree with the params' structure whose leaves are tuples of logical
names (models.transformer.param_axes). Batches: a dict of arrays whose keys end in a shape
suffix (`tokens_BT`, `rewards_BS`); each suffix letter names a logical axis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import jax
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from parallel.rules import current_rules, logical_to_spec

# Shape-suffix letter -> logical axis name, for host batches.
SUFFIX_AXES = {"B": "batch", "T": "length", "S": "segments"}


def is_axes_leaf(x) -> bool:
  """A tuple of logical names (possibly empty) is one leaf, not a pytree node."""
  return isinstance(x, tuple) and all(a is None or isinstance(a, str) for a in x)


def fit_spec(spec: PartitionSpec, shape: Sequence[int], mesh: Mesh) -> PartitionSpec:
  """Keeps, per dim, the longest prefix of mesh axes whose size product divides the dim.

  A tiny model (one kv head on tensor=2) then stays replicated on that dim instead of
  failing to compile; large models divide evenly and keep the full spec.
  """
  out = []
  for dim, entry in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)), strict=True):
    axes = (entry,) if isinstance(entry, str) else tuple(entry or ())
    keep: list[str] = []
    for a in axes:
      if dim % (math.prod(mesh.shape[b] for b in keep) * mesh.shape[a]):
        break
      keep.append(a)
    out.append(None if not keep else keep[0] if len(keep) == 1 else tuple(keep))
  return PartitionSpec(*out)


def named_sharding(names, shape, mesh: Mesh, rules=None) -> NamedSharding:
  """NamedSharding for an array of `shape` whose axes carry logical `names`."""
  if len(names) != len(shape):
    raise ValueError(f"logical names {tuple(names)} do not match the shape {tuple(shape)}")
  spec = logical_to_spec(names, rules=rules if rules is not None else current_rules(), mesh=mesh)
  return NamedSharding(mesh, fit_spec(spec, shape, mesh))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def param_shardings(axes, abstract_params, mesh: Mesh, rules=None):
  """Shardings for params from their logical axes and shapes (arrays or ShapeDtypeStructs)."""
  return jax.tree.map(
    lambda names, p: named_sharding(names, p.shape, mesh, rules),
    axes,
    abstract_params,
    is_leaf=is_axes_leaf,
  )


def opt_state_shardings(tx: optax.GradientTransformation, abstract_opt_state, p_shardings, mesh):
  """Optimizer state: parameter-shaped parts follow the params, the rest is replicated."""
  rep = replicated(mesh)
  return optax.tree_map_params(
    tx,
    lambda _, s: s,
    abstract_opt_state,
    p_shardings,
    transform_non_params=lambda _: rep,
    is_leaf=lambda x: isinstance(x, NamedSharding),
  )


def suffix_names(key: str, ndim: int) -> tuple[str | None, ...]:
  """'tokens_BT' -> ('batch', 'length'); raises naming the key if the suffix is wrong."""
  suffix = key.rsplit("_", 1)[-1] if "_" in key else ""
  if len(suffix) != ndim or any(c not in SUFFIX_AXES for c in suffix):
    raise ValueError(
      f"batch key {key!r}: expected a shape suffix of {ndim} letters from "
      f"{sorted(SUFFIX_AXES)} (e.g. tokens_BT), got {suffix!r}"
    )
  return tuple(SUFFIX_AXES[c] for c in suffix)


def batch_shardings(batch: Mapping, mesh: Mesh, rules=None) -> dict:
  """Shardings for a flat dict batch, the batch axis split over (data, fsdp, expert)."""
  out = {}
  for key, x in batch.items():
    names = suffix_names(key, len(x.shape))
    spec = logical_to_spec(names, rules=rules if rules is not None else current_rules(), mesh=mesh)
    rows = spec[0] if spec else None
    rows = (rows,) if isinstance(rows, str) else tuple(rows or ())
    n = math.prod(mesh.shape[a] for a in rows)
    if x.shape[0] % n:
      raise ValueError(
        f"batch key {key!r}: {x.shape[0]} rows do not divide over mesh axes {rows} "
        f"(size {n}); use a batch size that is a multiple of {n}"
      )
    out[key] = NamedSharding(mesh, spec)
  return out


def shard_batch(batch: Mapping, mesh: Mesh, rules=None) -> dict:
  """Puts a host (NumPy) batch on the mesh with `batch_shardings`."""
  return jax.device_put(dict(batch), batch_shardings(batch, mesh, rules))
