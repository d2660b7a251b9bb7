"""Hugging Face checkpoint interop: a local folder <-> (ModelConfig, params).

Reads config.json and model.safetensors (or a sharded model.safetensors.index.json);
writes the same layout back (round trip exact). Every tensor's name, dtype and shape is
checked against the config before any data is read, so a bad folder raises
`CheckpointError` naming the file, the tensor and expected vs found shape, and nothing
half-loaded is ever returned. HF linear weights are [out, in]; ours are [in, ...out].

Legend: L layers, E experts, D d_model, H heads, K kv heads, d head_dim, F d_ff, V vocab.
"""

from __future__ import annotations

import json
import pathlib

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from models import transformer
from models.config import ModelConfig
from models.hf_config import CheckpointError, config_from_hf, config_to_hf
from models.tokenizer import HFTokenizer

__all__ = ["CheckpointError", "config_from_hf", "config_to_hf", "load", "load_tokenizer", "save"]


_DTYPES = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "F16": np.float16}
_NP_PARAM = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some old checkpoints carry


# ------------------------------------------------------------------ tensors

_LAYER_NAMES = {  # our layer leaf -> (HF name under model.layers.{i}., HF [out, in] layout?)
  "attn_norm": ("input_layernorm.weight", False),
  "wq": ("self_attn.q_proj.weight", True),
  "wk": ("self_attn.k_proj.weight", True),
  "wv": ("self_attn.v_proj.weight", True),
  "wo": ("self_attn.o_proj.weight", True),
  "bq": ("self_attn.q_proj.bias", False),
  "bk": ("self_attn.k_proj.bias", False),
  "bv": ("self_attn.v_proj.bias", False),
  "bo": ("self_attn.o_proj.bias", False),
  "q_norm": ("self_attn.q_norm.weight", False),
  "k_norm": ("self_attn.k_norm.weight", False),
  "mlp_norm": ("post_attention_layernorm.weight", False),
  "w_gate": ("mlp.gate_proj.weight", True),
  "w_up": ("mlp.up_proj.weight", True),
  "w_down": ("mlp.down_proj.weight", True),
}
_MOE_NAMES = {  # arch -> (router name, expert prefix, {our leaf: expert weight name})
  "qwen3_moe": (
    "mlp.gate.weight",
    "mlp.experts",
    {"we_gate": "gate_proj", "we_up": "up_proj", "we_down": "down_proj"},
  ),
  "mixtral": (
    "block_sparse_moe.gate.weight",
    "block_sparse_moe.experts",
    {"we_gate": "w1", "we_up": "w3", "we_down": "w2"},
  ),
}


def tensor_specs(cfg: ModelConfig):
  """[(leaf path, index, HF name, HF shape, transposed)] for every tensor of `cfg`."""
  shapes = transformer.param_shapes(cfg)
  specs = [
    (("embed",), (), "model.embed_tokens.weight", shapes["embed"], False),
    (("final_norm",), (), "model.norm.weight", shapes["final_norm"], False),
  ]
  if not cfg.tie_embeddings:
    specs.append((("lm_head",), (), "lm_head.weight", shapes["lm_head"][::-1], True))
  for leaf, full in shapes["layers"].items():
    for i in range(cfg.n_layers):
      pre = f"model.layers.{i}."
      if leaf in _LAYER_NAMES:
        name, tr = _LAYER_NAMES[leaf]
        hf = _layer_hf_shape(leaf, full[1:], tr)
        specs.append((("layers", leaf), (i,), pre + name, hf, tr))
      elif leaf == "router":
        specs.append((("layers", leaf), (i,), pre + _MOE_NAMES[cfg.arch][0], full[1:][::-1], True))
      else:
        _, prefix, names = _MOE_NAMES[cfg.arch]
        for e in range(cfg.n_experts):
          name = f"{pre}{prefix}.{e}.{names[leaf]}.weight"
          specs.append((("layers", leaf), (i, e), name, full[2:][::-1], True))
  return specs


def _layer_hf_shape(leaf: str, shape: tuple[int, ...], transpose: bool) -> tuple[int, ...]:
  if not transpose:
    return (int(np.prod(shape)),)
  if leaf == "wo":  # [H, d, D] -> [D, H*d]
    return (shape[2], shape[0] * shape[1])
  return (int(np.prod(shape[1:])), shape[0])  # [D, *out] -> [prod(out), D]


def _to_ours(arr: np.ndarray, slot_shape, transpose: bool) -> np.ndarray:
  return (arr.T if transpose else arr).reshape(slot_shape)


def _to_hf(val: np.ndarray, hf_shape, transpose: bool) -> np.ndarray:
  return np.ascontiguousarray(val.reshape(hf_shape[::-1]).T if transpose else val.reshape(hf_shape))


# ------------------------------------------------------------------ load


def _read_json(file: pathlib.Path) -> dict:
  if not file.is_file():
    raise CheckpointError(f"{file}: missing")
  try:
    return json.loads(file.read_text())
  except json.JSONDecodeError as e:
    raise CheckpointError(f"{file}: invalid JSON: {e}") from e


def _weight_files(path: pathlib.Path) -> dict[str, pathlib.Path]:
  """HF tensor name -> the safetensors file holding it."""
  index = path / "model.safetensors.index.json"
  single = path / "model.safetensors"
  if index.is_file():
    weight_map = _read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
      raise CheckpointError(f"{index}: no 'weight_map'")
    files = {name: path / fname for name, fname in weight_map.items()}
    for f in sorted(set(files.values())):
      if not f.is_file():
        raise CheckpointError(f"{index}: shard {f.name} is missing ({f})")
    return files
  if single.is_file():
    return {}  # filled from the file's own header
  raise CheckpointError(
    f"{path}: no model.safetensors or model.safetensors.index.json "
    "(only safetensors checkpoints are supported)"
  )


def _headers(path: pathlib.Path, files: dict[str, pathlib.Path], stack):
  """name -> (open handle, file, dtype string, shape), reading headers only."""
  if not files:
    files = {None: path / "model.safetensors"}
  out, handles = {}, {}
  for f in sorted(set(files.values())):
    try:
      handles[f] = stack.enter_context(safe_open(str(f), framework="numpy"))
    except Exception as e:  # safetensors raises its own error types for bad headers
      raise CheckpointError(f"{f}: cannot read safetensors header: {e}") from e
    for name in handles[f].keys():
      if None in files or files.get(name) == f:
        sl = handles[f].get_slice(name)
        out[name] = (handles[f], f, sl.get_dtype(), tuple(sl.get_shape()))
  for name, f in files.items():
    if name is not None and name not in out:
      raise CheckpointError(f"{f}: tensor {name} listed in the index is not in the file")
  return out


def _validate(cfg: ModelConfig, specs, headers, path: pathlib.Path) -> None:
  expected = {s[2] for s in specs}
  for _, _, name, shape, _ in specs:
    if name not in headers:
      where = (
        "model.safetensors.index.json"
        if (path / "model.safetensors.index.json").is_file()
        else "model.safetensors"
      )
      raise CheckpointError(f"{path / where}: missing tensor {name} (expected shape {shape})")
    _, f, dt, found = headers[name]
    if dt not in _DTYPES:
      raise CheckpointError(
        f"{f}: tensor {name} has unsupported dtype {dt} (supported: {sorted(_DTYPES)})"
      )
    if found != tuple(shape):
      raise CheckpointError(f"{f}: tensor {name}: expected shape {tuple(shape)}, found {found}")
  ignored = {"lm_head.weight"} if cfg.tie_embeddings else set()
  extra = sorted(
    n
    for n in headers
    if n not in expected and n not in ignored and not n.endswith(_IGNORED_SUFFIXES)
  )
  if extra:
    raise CheckpointError(
      f"{headers[extra[0]][1]}: unexpected tensors for {cfg.arch} "
      f"(unsupported feature?): {extra[:5]}"
    )


def load(path, *, dtype: str = "float32", param_dtype: str = "float32", **overrides):
  """Loads a local HF checkpoint folder into (ModelConfig, params).

  Args:
    path: folder with config.json and model.safetensors (or a sharded index).
    dtype: compute dtype recorded in the config ('float32' or 'bfloat16').
    param_dtype: dtype of the returned params.
    **overrides: other ModelConfig fields (remat, attention, attn_chunk, ...).
  Raises:
    CheckpointError: naming the file, tensor and expected vs found shape.
  """
  import contextlib

  path = pathlib.Path(path)
  cfg_file = path / "config.json"
  cfg = config_from_hf(
    _read_json(cfg_file), cfg_file, dtype=dtype, param_dtype=param_dtype, **overrides
  )
  specs = tensor_specs(cfg)
  np_dt = _NP_PARAM[param_dtype]
  with contextlib.ExitStack() as stack:
    headers = _headers(path, _weight_files(path), stack)
    _validate(cfg, specs, headers, path)
    shapes = transformer.param_shapes(cfg)
    flat = {("layers", k): np.empty(v, np_dt) for k, v in shapes["layers"].items()}
    flat.update({(k,): np.empty(v, np_dt) for k, v in shapes.items() if k != "layers"})
    for leaf, index, name, _, transpose in specs:
      arr = headers[name][0].get_tensor(name)
      slot = flat[leaf][index] if index else flat[leaf]
      slot[...] = _to_ours(arr, slot.shape, transpose).astype(np_dt)
  params = {k[0]: jnp.asarray(v) for k, v in flat.items() if len(k) == 1}
  params["layers"] = {k[1]: jnp.asarray(v) for k, v in flat.items() if len(k) == 2}
  return cfg, params


def load_tokenizer(path) -> HFTokenizer:
  """The checkpoint's tokenizer (tokenizer.json + chat template)."""
  return HFTokenizer.from_dir(path)


# ------------------------------------------------------------------ save


def save(path, cfg: ModelConfig, params, *, max_shard_bytes: int | None = None) -> None:
  """Writes config.json and safetensors (sharded with an index if max_shard_bytes is set).

  Tensors keep the params' dtype, so save -> load is exact. Earlier model*.safetensors
  files and index in the folder are removed first so a stale shard cannot be read back.
  """
  path = pathlib.Path(path)
  hf_cfg = config_to_hf(cfg)
  shapes = transformer.param_shapes(cfg)
  got = {k: tuple(np.shape(v)) for k, v in params.items() if k != "layers"}
  got.update({("layers", k): tuple(np.shape(v)) for k, v in params["layers"].items()})
  want = {k: v for k, v in shapes.items() if k != "layers"}
  want.update({("layers", k): v for k, v in shapes["layers"].items()})
  if got != want:
    bad = sorted(str(k) for k in set(got) ^ set(want) | {k for k in got if got[k] != want.get(k)})
    raise ValueError(f"params do not match the config: {bad[:5]}")
  host = {k: np.asarray(v) for k, v in params.items() if k != "layers"}
  host.update({("layers", k): np.asarray(v) for k, v in params["layers"].items()})
  tensors = {}
  for leaf, index, name, hf_shape, transpose in tensor_specs(cfg):
    val = host[leaf if len(leaf) == 2 else leaf[0]]
    tensors[name] = _to_hf(val[index] if index else val, hf_shape, transpose)
  path.mkdir(parents=True, exist_ok=True)
  for old in [*path.glob("model*.safetensors"), path / "model.safetensors.index.json"]:
    old.unlink(missing_ok=True)
  _write_tensors(path, tensors, max_shard_bytes)
  (path / "config.json").write_text(json.dumps(hf_cfg, indent=2) + "\n")


def _write_tensors(path: pathlib.Path, tensors: dict, max_shard_bytes: int | None) -> None:
  meta = {"format": "pt"}
  if not max_shard_bytes:
    save_file(tensors, str(path / "model.safetensors"), metadata=meta)
    return
  shards, cur, size = [], {}, 0
  for name, arr in tensors.items():
    if cur and size + arr.nbytes > max_shard_bytes:
      shards.append(cur)
      cur, size = {}, 0
    cur[name], size = arr, size + arr.nbytes
  shards.append(cur)
  weight_map = {}
  for i, shard in enumerate(shards):
    fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
    save_file(shard, str(path / fname), metadata=meta)
    weight_map.update(dict.fromkeys(shard, fname))
  index = {
    "metadata": {"total_size": sum(a.nbytes for a in tensors.values())},
    "weight_map": weight_map,
  }
  (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
