"""Mesh construction, rule overrides and sharding helpers on 8 fake CPU devices."""

import jax
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, PartitionSpec

from parallel import sharding
from parallel.mesh import MeshConfig, make_mesh, resolve_sizes
from parallel.rules import DEFAULT_RULES, logical_to_spec, merge_rules


def test_fill_and_axis_types():
  mesh = make_mesh(MeshConfig(data=2, fsdp=-1, tensor=2))
  assert mesh.axis_names == ("data", "fsdp", "tensor", "sequence", "expert")
  assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2, "sequence": 1, "expert": 1}
  assert all(t == AxisType.Auto for t in mesh.axis_types)
  mesh = make_mesh(MeshConfig(fsdp=1, expert=-1, axis_type="explicit"))
  assert mesh.shape["expert"] == 8
  assert all(t == AxisType.Explicit for t in mesh.axis_types)


def test_device_count_mismatch_names_axes_and_count():
  with pytest.raises(ValueError, match=r"data=2 x fsdp=2 x tensor=3 .* needs 12 devices but 8"):
    make_mesh(MeshConfig(data=2, fsdp=2, tensor=3))
  with pytest.raises(ValueError, match=r"tensor=3.*8 devices.*multiply to 3"):
    resolve_sizes(MeshConfig(tensor=3), 8)
  with pytest.raises(ValueError, match="at most one axis may be -1.*data, fsdp"):
    resolve_sizes(MeshConfig(data=-1), 8)
  with pytest.raises(ValueError, match="axis_type"):
    make_mesh(MeshConfig(axis_type="manual"))


def test_subset_of_devices():
  mesh = make_mesh(MeshConfig(data=2, fsdp=1), devices=jax.devices()[:2])
  assert mesh.devices.size == 2


def test_rule_overrides():
  rules = merge_rules(DEFAULT_RULES, ["vocab=", "embed=fsdp+data", ("mlp", None)])
  table = dict(rules)
  assert table["vocab"] is None and table["embed"] == ("fsdp", "data") and table["mlp"] is None
  assert [n for n, _ in rules][: len(DEFAULT_RULES)] == [n for n, _ in DEFAULT_RULES]
  with pytest.raises(ValueError, match="unknown mesh axes.*'model'"):
    merge_rules(DEFAULT_RULES, ["heads=model"])
  with pytest.raises(ValueError, match="expected 'logical_name=mesh_axis"):
    merge_rules(DEFAULT_RULES, ["heads"])


def test_logical_to_spec_drops_unit_and_reused_axes():
  mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
  assert logical_to_spec(("batch", "length"), mesh=mesh) == PartitionSpec(("data", "fsdp"), None)
  assert logical_to_spec(("embed", "embed"), mesh=mesh) == PartitionSpec("fsdp", None)


def test_param_and_opt_state_shardings():
  mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
  params = {
    "w": jax.ShapeDtypeStruct((8, 6), np.float32),
    "kv": jax.ShapeDtypeStruct((4, 1), np.float32),
  }
  axes = {"w": ("embed", "mlp"), "kv": ("embed", "kv_heads")}
  p_sh = sharding.param_shardings(axes, params, mesh)
  assert p_sh["w"].spec == PartitionSpec("fsdp", "tensor")
  assert p_sh["kv"].spec == PartitionSpec("fsdp", None)  # one kv head cannot split 2 ways
  tx = optax.adamw(1e-3)
  o_sh = sharding.opt_state_shardings(tx, jax.eval_shape(tx.init, params), p_sh, mesh)
  adam = o_sh[0]
  assert adam.mu["w"].spec == PartitionSpec("fsdp", "tensor")
  assert adam.count.spec == PartitionSpec()


def test_batch_shardings_by_suffix():
  mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
  batch = {"tokens_BT": np.zeros((8, 5), np.int32), "rewards_BS": np.zeros((8, 2))}
  sh = sharding.batch_shardings(batch, mesh)
  assert sh["tokens_BT"].spec == PartitionSpec(("data", "fsdp"), None)
  out = sharding.shard_batch(batch, mesh)
  assert out["rewards_BS"].sharding.spec == PartitionSpec(("data", "fsdp"), None)
  with pytest.raises(ValueError, match="'tokens_BT': 6 rows do not divide"):
    sharding.batch_shardings({"tokens_BT": np.zeros((6, 5))}, mesh)
  with pytest.raises(ValueError, match="batch key 'tokens'"):
    sharding.batch_shardings({"tokens": np.zeros((8, 5))}, mesh)
