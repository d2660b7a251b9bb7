"""Logical axis names -> mesh axes: the one rules table.

Models annotate every weight and activation with logical names only (batch, length,
embed, heads, kv_heads, head_dim, mlp, vocab, experts, layers, lora_rank). This table maps them to
the mesh axes (data, fsdp, tensor, sequence, expert). Override it from config with
`merge_rules(DEFAULT_RULES, overrides)`; an override is a (name, target) pair or a string
"name=axis1+axis2" ("name=" replicates).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor", "sequence", "expert")

# logical name -> mesh axis, tuple of mesh axes, or None (replicated).
DEFAULT_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
  # Expert-parallel devices also split the batch outside the MoE layers.
  ("batch", ("data", "fsdp", "expert")),
  ("length", "sequence"),
  ("embed", "fsdp"),
  ("act_embed", None),
  ("heads", "tensor"),
  ("kv_heads", "tensor"),
  ("head_dim", None),
  ("mlp", "tensor"),
  ("vocab", "tensor"),
  ("experts", "expert"),
  ("layers", None),
  ("cache_length", None),
  ("segments", None),
  ("lora_rank", None),  # LoRA adapters (models/lora.py): the rank axis stays whole
)

_state = threading.local()

Target = str | tuple[str, ...] | None


def parse_rule(rule: str | tuple[str, Target]) -> tuple[str, Target]:
  """'embed=fsdp' / 'batch=data+fsdp' / 'vocab=' (replicated) or a pair -> a (name, target) pair."""
  if isinstance(rule, str):
    if "=" not in rule:
      raise ValueError(f"sharding rule {rule!r}: expected 'logical_name=mesh_axis[+mesh_axis]'")
    name, rhs = (part.strip() for part in rule.split("=", 1))
    axes = tuple(a.strip() for a in rhs.split("+") if a.strip())
    target: Target = None if not axes else axes[0] if len(axes) == 1 else axes
  else:
    name, target = rule
  axes = (target,) if isinstance(target, str) else tuple(target or ())
  unknown = [a for a in axes if a not in MESH_AXES]
  if unknown:
    raise ValueError(f"sharding rule for {name!r}: unknown mesh axes {unknown}; known: {MESH_AXES}")
  return name, target


def merge_rules(base=DEFAULT_RULES, overrides=()) -> tuple[tuple[str, Target], ...]:
  """`base` with entries replaced (or appended) by `overrides`, keeping base order."""
  table = dict(base)
  for rule in overrides:
    name, target = parse_rule(rule)
    table[name] = target
  return tuple(table.items())


def current_rules():
  return getattr(_state, "rules", DEFAULT_RULES)


def current_mesh():
  return getattr(_state, "mesh", None)


@contextlib.contextmanager
def use_mesh_rules(mesh, rules=None):
  """Activates `mesh` and `rules` for `constrain` inside the block (trace time)."""
  old = (getattr(_state, "mesh", None), getattr(_state, "rules", DEFAULT_RULES))
  _state.mesh, _state.rules = mesh, tuple(rules) if rules is not None else DEFAULT_RULES
  try:
    yield
  finally:
    _state.mesh, _state.rules = old


def logical_to_spec(names: Sequence[str | None], rules=None, mesh=None) -> PartitionSpec:
  """Maps logical axis names to a PartitionSpec; a mesh axis is used at most once."""
  table = dict(rules if rules is not None else current_rules())
  mesh = mesh if mesh is not None else current_mesh()
  used: set[str] = set()
  out = []
  for name in names:
    target = table.get(name) if name is not None else None
    axes = (target,) if isinstance(target, str) else tuple(target or ())
    # Drop axes already used or of size 1 so specs stay valid and minimal.
    axes = tuple(a for a in axes if a not in used and (mesh is None or mesh.shape.get(a, 1) > 1))
    used.update(axes)
    out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
  return PartitionSpec(*out)


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
  """with_sharding_constraint by logical names; a no-op when no mesh is active."""
  mesh = current_mesh()
  if mesh is None:
    return x
  if len(names) != x.ndim:
    raise ValueError(f"logical names {tuple(names)} do not match rank {x.ndim} of {x.shape}")
  return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, logical_to_spec(names)))
